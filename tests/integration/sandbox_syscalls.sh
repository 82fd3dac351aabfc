#!/bin/bash
# Attacks: "crash the host kernel" and escape through namespaces and mounts. Module loading,
# kexec, bpf, perf_event_open, userfaultfd, the keyrings, ptrace, io_uring (its operations bypass
# seccomp), open_by_handle_at, mount, umount, pivot_root, unshare, setns, the new mount API and
# clone with namespace flags all fail with EPERM; clone3 with ENOSYS (libc falls back to clone).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/sandbox.sh"

check attack -- syscalls
# The same refusals hold for a non-root user inside.
check attack --user 1000:1000 -- syscalls
check sb_no_leftovers
