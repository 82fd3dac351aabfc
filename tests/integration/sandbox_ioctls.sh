#!/bin/bash
# Attack: "swap the contents of protected files onto their own descriptors with XFS_IOC_SWAPEXT"
# (and the reflink and dedupe relatives). Each of FICLONE, FICLONERANGE, FIDEDUPERANGE,
# XFS_IOC_SWAPEXT and the XFS exchange-range and commit-range ioctls fails with EPERM, also with
# high bits set in the 64-bit request (the kernel keeps only the low 32); an ordinary ioctl works.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"

check attack -- ioctls
check sb_no_leftovers
