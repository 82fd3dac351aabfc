/*
 * caps.c — drop every capability but those a command run as root keeps
 * (CAPS_ROOT_KEPT): bounding and ambient sets first (that needs
 * CAP_SETPCAP), then inheritable, permitted and effective; and raise
 * the effective set again for the launcher, which clones a sandbox with its
 * effective uid set to the sandbox's own (launch.c).  Raw syscalls, so that
 * the launcher needs no libcap.
 */
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

int caps_drop_bounding(void)
{
	for (unsigned long c = 0;; c++) {
		if (c < 64 && (CAPS_ROOT_KEPT & (1ull << c)))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL && c > CAP_LAST_CAP / 2)
				break;   /* past the kernel's last capability */
			return log_errno(-errno, "drop capability %lu from the bounding set", c);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return log_errno(-errno, "clear the ambient capabilities");
	return 0;
}

int caps_limit(uint64_t keep)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(d, 0, sizeof(d));
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		d[i].permitted = d[i].effective = (uint32_t)(keep >> (32 * i));
	if (syscall(SYS_capset, &h, d) < 0)
		return log_errno(-errno, "drop the capabilities");
	return 0;
}

int caps_drop_all(void)
{
	return caps_limit(0);
}

int caps_raise_effective(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		d[i].effective = d[i].permitted;
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	return 0;
}
