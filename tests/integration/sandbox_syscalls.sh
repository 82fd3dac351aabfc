#!/bin/bash
# Attacks: "crash the host kernel" and escape through namespaces and mounts. Module loading,
# kexec, bpf, perf_event_open, userfaultfd, the keyrings, ptrace, io_uring (its operations bypass
# seccomp), open_by_handle_at, mount, umount, pivot_root, unshare, setns, the new mount API and
# clone with namespace flags all fail with EPERM; clone3 with ENOSYS (libc falls back to clone).
# The filter is an allowlist (sandbox/POLICY.md, "The syscall filter"): syscalls this kernel has
# but the list does not name fail with ENOSYS, the newer dangerous ones (open_tree_attr,
# listmount, statmount, modify_ldt, personality flags beyond Docker's) with EPERM; x32 and i386
# syscalls kill the process; mincore, cachestat and preadv2(RWF_NOWAIT), which would tell which
# pages of the shared image other sandboxes read, are refused.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"

check attack -- syscalls
check attack -- allowlist
# The same refusals hold for a non-root user inside, and with io_uring let through.
check attack --user 1000:1000 -- syscalls
check attack --user 1000:1000 -- allowlist
check attack --set io_uring=true -- allowlist
check sb_no_leftovers
