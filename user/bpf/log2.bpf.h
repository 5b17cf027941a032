/* SPDX-License-Identifier: GPL-2.0 */
/*
 * floor(log2(v)), 0 for 0, without a loop: libbpf-tools' bits.bpf.h, for the log2
 * histograms of rkf funclatency (user/bpf/funclatency.bpf.c) and its benchmark
 * (tests/progs/bench_multi.bpf.c).
 */
#ifndef __RKF_LOG2_BPF_H
#define __RKF_LOG2_BPF_H

static __always_inline __u32 log2_u32(__u32 v)
{
	__u32 shift, r;

	r = (v > 0xFFFF) << 4;
	v >>= r;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	return r | (v >> 1);
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? log2_u32(hi) + 32 : log2_u32(v);
}

#endif /* __RKF_LOG2_BPF_H */
