/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stands in for the kernel's <linux/errno.h>, which libbpf's usdt.bpf.h
 * includes: it needs <asm/errno.h> from kernel headers, and flare builds
 * without them. Only the values usdt.bpf.h uses are defined.
 */
#ifndef FLARE_LINUX_ERRNO_H
#define FLARE_LINUX_ERRNO_H

#define ENOENT 2
#define ESRCH 3
#define EINVAL 22

#endif
