/*
 * netpolicy.c — the network allowlist and the stages of a running sandbox.
 *
 * Without an allowlist a sandbox has only its own loopback (setup.c), and
 * nothing here runs.  With one (`allow`, or the starting stage's), the
 * launcher gives it a path out and a guard on that path:
 *
 *   - a veth pair: "lr<pid>.<n>" on the host with 100.64.X.Y+1/30, "eth0" in
 *     the sandbox's network namespace with +2/30 and a default route through
 *     the host side; the /30 is picked by the host side's ifindex, unique
 *     among live interfaces.  Services on the host are reached at the host
 *     side's address ("host:PORT" in the allowlist names it); anything further
 *     needs the operator to forward and masquerade 100.64.0.0/10, which the
 *     launcher does not touch.  Both ends vanish with the sandbox's network
 *     namespace.
 *   - four cgroup BPF programs (connect4, connect6, sendmsg4, sendmsg6)
 *     attached with bpf_link to the sandbox's cgroup2 directory.  Each lets
 *     loopback (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) through and looks
 *     every other destination up in a hash map of (address, port); a miss
 *     fails the connect or sendmsg with EPERM.  Connect hooks, not packet
 *     filters: a refused connect fails at once instead of timing out, and
 *     they also see connects submitted through io_uring.  The links and the
 *     map live as long as the launcher's descriptors: a launcher that dies,
 *     even by SIGKILL, leaves no program attached.
 *
 * Stages: when the policy declares any, the launcher writes the sandbox's
 * state to /run/lazyroot/sandboxes/NAME/state (root only): the init's pid and
 * start time, the map's id, the host address, the current stage, allowlist
 * and hidden paths, and every stage.  `lazyroot policy NAME --stage S`
 * (netpolicy_switch) takes the file's lock, checks that S only tightens —
 * its allowlist a subset of the current one; hidden paths only add up — then
 * deletes the entries S drops from the map (refused from the next connect
 * on), covers S's hidden paths inside the sandbox's mount namespace with an
 * empty mode-000 mount, and records S.  The map is found by id
 * (BPF_MAP_GET_FD_BY_ID), not pinned, so that nothing of it outlives the
 * launcher.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/mount.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <net/route.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/openat2.h>
#include <time.h>

#include "lib/lib.h"
#include "sandbox/sandbox-internal.h"

#define STATE_ROOT_DEFAULT "/run/lazyroot/sandboxes"
#define MAP_NAME "lr_allow"
#define MAP_MAX 1024

/* Where running sandboxes' state directories are: the node's state_dir. */
static const char *state_root(const struct sandbox_node *n)
{
	return n && n->state_dir ? n->state_dir : STATE_ROOT_DEFAULT;
}

/* The map's key: the destination as ::ffff:a.b.c.d or IPv6, and the port as
 * the hooks read it (network byte order in the low 16 bits). */
struct allow_key {
	uint32_t addr[4];
	uint32_t port;
};

/* ---- the BPF programs, as raw instructions ------------------------------ */

#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), \
                                               .off = (o), .imm = (i) })
#define MOV64_REG(d, s)    INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i)    INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i)    INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i)    INSN(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define LDX_W(d, s, o)     INSN(BPF_LDX | BPF_MEM | BPF_W, d, s, o, 0)
#define STX_W(d, s, o)     INSN(BPF_STX | BPF_MEM | BPF_W, d, s, o, 0)
#define ST_W(d, o, i)      INSN(BPF_ST | BPF_MEM | BPF_W, d, 0, o, i)
#define JEQ32(d, i, o)     INSN(BPF_JMP32 | BPF_JEQ | BPF_K, d, 0, o, i)
#define JNE32(d, i, o)     INSN(BPF_JMP32 | BPF_JNE | BPF_K, d, 0, o, i)
#define JEQ64(d, i, o)     INSN(BPF_JMP | BPF_JEQ | BPF_K, d, 0, o, i)
#define JA(o)              INSN(BPF_JMP | BPF_JA, 0, 0, o, 0)
#define CALL(f)            INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT()             INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
#define LD_MAP_FD(d, fd)   INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), \
                           INSN(0, 0, 0, 0, 0)

#define OFF_IP4  ((short)offsetof(struct bpf_sock_addr, user_ip4))
#define OFF_IP6(i) ((short)(offsetof(struct bpf_sock_addr, user_ip6) + 4 * (i)))
#define OFF_PORT ((short)offsetof(struct bpf_sock_addr, user_port))

/* The common tail: the key (r2..r5 = address words) on the stack at
 * fp-20, then allow (1) on a map hit, refuse (0) otherwise. */
#define LOOKUP_TAIL(map)                                                        \
	STX_W(BPF_REG_10, BPF_REG_2, -20), STX_W(BPF_REG_10, BPF_REG_3, -16),   \
	STX_W(BPF_REG_10, BPF_REG_4, -12), STX_W(BPF_REG_10, BPF_REG_5, -8),    \
	LDX_W(BPF_REG_2, BPF_REG_6, OFF_PORT), STX_W(BPF_REG_10, BPF_REG_2, -4), \
	LD_MAP_FD(BPF_REG_1, map),                                              \
	MOV64_REG(BPF_REG_2, BPF_REG_10), ADD64_IMM(BPF_REG_2, -20),            \
	CALL(BPF_FUNC_map_lookup_elem),                                         \
	JEQ64(BPF_REG_0, 0, 2),                                                 \
	MOV64_IMM(BPF_REG_0, 1), EXIT(),                                        \
	MOV64_IMM(BPF_REG_0, 0), EXIT()

static int prog_v4(int map, struct bpf_insn *out)
{
	const struct bpf_insn p[] = {
		MOV64_REG(BPF_REG_6, BPF_REG_1),
		LDX_W(BPF_REG_5, BPF_REG_6, OFF_IP4),
		MOV64_REG(BPF_REG_0, BPF_REG_5),
		AND32_IMM(BPF_REG_0, 0xff),
		JNE32(BPF_REG_0, 127, 2),
		MOV64_IMM(BPF_REG_0, 1),
		EXIT(),
		MOV64_IMM(BPF_REG_2, 0),
		MOV64_IMM(BPF_REG_3, 0),
		MOV64_IMM(BPF_REG_4, (int32_t)0xffff0000),
		LOOKUP_TAIL(map),
	};

	memcpy(out, p, sizeof(p));
	return (int)ARRAY_SIZE(p);
}

static int prog_v6(int map, struct bpf_insn *out)
{
	const struct bpf_insn p[] = {
		MOV64_REG(BPF_REG_6, BPF_REG_1),
		LDX_W(BPF_REG_2, BPF_REG_6, OFF_IP6(0)),
		LDX_W(BPF_REG_3, BPF_REG_6, OFF_IP6(1)),
		LDX_W(BPF_REG_4, BPF_REG_6, OFF_IP6(2)),
		LDX_W(BPF_REG_5, BPF_REG_6, OFF_IP6(3)),
		/* ::1 and ::ffff:127.0.0.0/104 are the sandbox's own loopback */
		JNE32(BPF_REG_2, 0, 10),
		JNE32(BPF_REG_3, 0, 9),
		JNE32(BPF_REG_4, 0, 2),
		JEQ32(BPF_REG_5, (int32_t)htonl(1), 5),
		JA(6),
		JNE32(BPF_REG_4, (int32_t)0xffff0000, 5),
		MOV64_REG(BPF_REG_0, BPF_REG_5),
		AND32_IMM(BPF_REG_0, 0xff),
		JNE32(BPF_REG_0, 127, 2),
		MOV64_IMM(BPF_REG_0, 1),
		EXIT(),
		LOOKUP_TAIL(map),
	};

	memcpy(out, p, sizeof(p));
	return (int)ARRAY_SIZE(p);
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

static int map_create(void)
{
	union bpf_attr a = { 0 };
	int fd;

	a.map_type = BPF_MAP_TYPE_HASH;
	a.key_size = sizeof(struct allow_key);
	a.value_size = sizeof(uint32_t);
	a.max_entries = MAP_MAX;
	strcpy(a.map_name, MAP_NAME);
	fd = (int)sys_bpf(BPF_MAP_CREATE, &a);
	if (fd < 0)
		return log_errno(-errno, "network allowlist: create the BPF map");
	return fd;
}

static int prog_load(int map, bool v6, enum bpf_attach_type type, const char *name)
{
	struct bpf_insn insns[64];
	char vlog[4096] = "";
	union bpf_attr a = { 0 };
	int n = v6 ? prog_v6(map, insns) : prog_v4(map, insns), fd;

	a.prog_type = BPF_PROG_TYPE_CGROUP_SOCK_ADDR;
	a.expected_attach_type = type;
	a.insns = (uint64_t)(uintptr_t)insns;
	a.insn_cnt = (uint32_t)n;
	a.license = (uint64_t)(uintptr_t)"GPL";
	a.log_buf = (uint64_t)(uintptr_t)vlog;
	a.log_size = sizeof(vlog);
	a.log_level = 1;
	snprintf(a.prog_name, sizeof(a.prog_name), "%s", name);
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd < 0) {
		int e = errno;

		/* The verifier's log only when the load failed; a short log is
		 * not an error. */
		if (e == ENOSPC) {
			a.log_level = 0;
			a.log_buf = 0;
			a.log_size = 0;
			fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
			if (fd >= 0)
				return fd;
		}
		return log_errno(-e, "network allowlist: load the %s program%s%s", name,
		                 vlog[0] ? "; verifier: " : "", vlog);
	}
	return fd;
}

static int map_update(int map, const struct allow_key *k)
{
	union bpf_attr a = { 0 };
	uint32_t one = 1;

	a.map_fd = (uint32_t)map;
	a.key = (uint64_t)(uintptr_t)k;
	a.value = (uint64_t)(uintptr_t)&one;
	a.flags = BPF_ANY;
	return sys_bpf(BPF_MAP_UPDATE_ELEM, &a) < 0 ? -errno : 0;
}

static int map_delete(int map, const struct allow_key *k)
{
	union bpf_attr a = { 0 };

	a.map_fd = (uint32_t)map;
	a.key = (uint64_t)(uintptr_t)k;
	return sys_bpf(BPF_MAP_DELETE_ELEM, &a) < 0 && errno != ENOENT ? -errno : 0;
}

static void key_of(const struct sandbox_addr *a, uint32_t host_ip, struct allow_key *k)
{
	memset(k, 0, sizeof(*k));
	if (a->host) {
		k->addr[2] = htonl(0xffff);
		k->addr[3] = host_ip;
	} else {
		memcpy(k->addr, a->addr, 16);
	}
	k->port = a->port;
}

/* ---- the veth pair ------------------------------------------------------ */

struct nlreq {
	struct nlmsghdr nh;
	struct ifinfomsg ifi;
	char buf[512];
};

static struct rtattr *nl_add(struct nlreq *r, unsigned short type, const void *data, size_t len)
{
	struct rtattr *rta = (struct rtattr *)((char *)r + NLMSG_ALIGN(r->nh.nlmsg_len));

	rta->rta_type = type;
	rta->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(rta), data, len);
	r->nh.nlmsg_len = NLMSG_ALIGN(r->nh.nlmsg_len) + RTA_ALIGN(rta->rta_len);
	return rta;
}

static void nl_end(struct nlreq *r, struct rtattr *nest)
{
	nest->rta_len = (unsigned short)((char *)r + r->nh.nlmsg_len - (char *)nest);
}

/* Send one request and wait for its acknowledgement. */
static int nl_talk(struct nlreq *req)
{
	_cleanup_close_ int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	char buf[4096];
	ssize_t n;

	if (s < 0)
		return -errno;
	req->nh.nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	req->nh.nlmsg_seq = 1;
	if (sendto(s, req, req->nh.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	n = recv(s, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
	     h = NLMSG_NEXT(h, n))
		if (h->nlmsg_type == NLMSG_ERROR)
			return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
	return -EPROTO;
}

static int veth_create(const char *host_name, int netns)
{
	struct nlreq r = { 0 };
	struct rtattr *linkinfo, *data, *peer;
	struct ifinfomsg peer_ifi = { .ifi_family = AF_UNSPEC };
	char *p;

	r.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	r.nh.nlmsg_type = RTM_NEWLINK;
	r.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	r.ifi.ifi_family = AF_UNSPEC;
	nl_add(&r, IFLA_IFNAME, host_name, strlen(host_name) + 1);
	linkinfo = nl_add(&r, IFLA_LINKINFO, NULL, 0);
	nl_add(&r, IFLA_INFO_KIND, "veth", 4);
	data = nl_add(&r, IFLA_INFO_DATA, NULL, 0);
	peer = nl_add(&r, VETH_INFO_PEER, NULL, 0);
	/* The peer's ifinfomsg sits in the attribute's payload, its own
	 * attributes after it. */
	p = (char *)&r + r.nh.nlmsg_len;
	memcpy(p, &peer_ifi, sizeof(peer_ifi));
	r.nh.nlmsg_len += NLMSG_ALIGN(sizeof(peer_ifi));
	nl_add(&r, IFLA_IFNAME, "eth0", 5);
	nl_add(&r, IFLA_NET_NS_FD, &netns, sizeof(netns));
	nl_end(&r, peer);
	nl_end(&r, data);
	nl_end(&r, linkinfo);
	return nl_talk(&r);
}

static void veth_delete(const char *name)
{
	struct nlreq r = { 0 };

	r.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	r.nh.nlmsg_type = RTM_DELLINK;
	r.ifi.ifi_family = AF_UNSPEC;
	nl_add(&r, IFLA_IFNAME, name, strlen(name) + 1);
	(void)nl_talk(&r);   /* gone with the namespace already: fine */
}

/* Address ifname (through socket s) with ip/30 and bring it up. */
static int if_config(int s, const char *ifname, uint32_t ip)
{
	struct ifreq ifr = { 0 };
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = ip;
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		return -errno;
	sin->sin_addr.s_addr = htonl(0xfffffffc);
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
		return -errno;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -errno;
	return 0;
}

/* Inside the sandbox's network namespace (a child process joins it): eth0
 * up with sb_ip, default route through gw. */
static int config_inside(int netns, uint32_t sb_ip, uint32_t gw)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		struct rtentry rt = { 0 };
		int s;

		if (setns(netns, CLONE_NEWNET) < 0)
			_exit(1);
		s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s < 0 || if_config(s, "eth0", sb_ip) < 0)
			_exit(2);
		((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
		((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
		((struct sockaddr_in *)&rt.rt_gateway)->sin_family = AF_INET;
		((struct sockaddr_in *)&rt.rt_gateway)->sin_addr.s_addr = gw;
		rt.rt_flags = RTF_UP | RTF_GATEWAY;
		if (ioctl(s, SIOCADDRT, &rt) < 0)
			_exit(3);
		_exit(0);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

static int veth_setup(struct net_state *ns, pid_t pid)
{
	static unsigned counter;
	char path[64];
	_cleanup_close_ int netns = -1, s = -1;
	unsigned idx;
	int r;

	/* lr<pid>.<n> in decimal, as ps shows the pid: "lr", 7 digits of a pid
	 * (pid_max is at most 4194304), a dot and 5 digits fit IFNAMSIZ. */
	snprintf(ns->veth, sizeof(ns->veth), "lr%u.%u", (unsigned)getpid(), counter++ % 100000);
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	netns = open(path, O_RDONLY | O_CLOEXEC);
	if (netns < 0)
		return log_errno(-errno, "open %s", path);
	r = veth_create(ns->veth, netns);
	if (r < 0) {
		ns->veth[0] = '\0';
		return log_errno(r, "network allowlist: create the veth pair");
	}
	idx = if_nametoindex(ns->veth);
	if (!idx)
		return log_errno(-errno, "network allowlist: veth '%s'", ns->veth);
	/* 100.64.0.0/10 holds 2^20 /30s. */
	ns->host_ip = htonl(0x64400000u + ((idx & 0xfffffu) << 2) + 1);
	ns->sb_ip = htonl(ntohl(ns->host_ip) + 1);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	r = if_config(s, ns->veth, ns->host_ip);
	if (r < 0)
		return log_errno(r, "network allowlist: address '%s'", ns->veth);
	r = config_inside(netns, ns->sb_ip, ns->host_ip);
	if (r < 0)
		return log_errno(r, "network allowlist: configure eth0 in the sandbox");
	return 0;
}

/* ---- addresses as text -------------------------------------------------- */

static void addr_text(const struct sandbox_addr *a, char *out, size_t len)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	char ip[INET6_ADDRSTRLEN];

	if (a->host) {
		snprintf(out, len, "host:%u", ntohs(a->port));
	} else if (!memcmp(a->addr, mapped, 12)) {
		inet_ntop(AF_INET, a->addr + 12, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->port));
	} else {
		inet_ntop(AF_INET6, a->addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->port));
	}
}

static bool addr_in(const struct sandbox_addr *a, const struct sandbox_addr *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a->host == list[i].host && a->port == list[i].port &&
		    (a->host || !memcmp(a->addr, list[i].addr, 16)))
			return true;
	return false;
}

/* ---- the state file ----------------------------------------------------- */

/* The start time of pid (field 22 of its stat), 0 when it is gone or a zombie. */
static uint64_t start_time(pid_t pid)
{
	char path[64];
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *p;
	uint64_t v = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file(path, 4096, &b) < 0 || !b.len)
		return 0;
	p = strrchr((char *)b.data, ')');
	/* A zombie (its launcher died) runs nothing any more. */
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		return 0;
	/* Field 22 is the start time; p is at the end of field 2. */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

/* What a running sandbox's stages need, as written to its state file. */
struct state {
	pid_t pid;
	uint64_t start;
	uint32_t map_id;
	uint32_t host_ip;
	char *current;
	struct sandbox_addr *allow;
	size_t n_allow;
	struct strv hidden;
	struct sandbox *sb;     /* holds the stages */
};

static int state_write(const char *dir, const struct state *st)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char path[PATH_MAX], a[96], ip[INET_ADDRSTRLEN];
	const struct sandbox *sb = st->sb;

	inet_ntop(AF_INET, &st->host_ip, ip, sizeof(ip));
	buf_printf(&b, "# lazyroot sandbox state: written by the launcher and `lazyroot policy`\n");
	buf_printf(&b, "pid = %d\nstart = %llu\nmap_id = %u\nhost = %s\ncurrent = %s\n",
	           (int)st->pid, (unsigned long long)st->start, st->map_id, ip, st->current);
	for (size_t i = 0; i < st->n_allow; i++) {
		addr_text(&st->allow[i], a, sizeof(a));
		buf_printf(&b, "allow = %s\n", a);
	}
	for (size_t i = 0; i < st->hidden.n; i++)
		buf_printf(&b, "hidden = %s\n", st->hidden.v[i]);
	for (size_t i = 0; i < sb->n_stages; i++) {
		const struct sandbox_stage *sg = &sb->stages[i];

		if (sg->has_allow && !sg->n_allow)
			buf_printf(&b, "stage.%s.allow =\n", sg->name);
		for (size_t j = 0; j < sg->n_allow; j++) {
			addr_text(&sg->allow[j], a, sizeof(a));
			buf_printf(&b, "stage.%s.allow = %s\n", sg->name, a);
		}
		for (size_t j = 0; j < sg->hide.n; j++)
			buf_printf(&b, "stage.%s.hide = %s\n", sg->name, sg->hide.v[j]);
		if (!sg->has_allow && !sg->hide.n)
			buf_printf(&b, "stage.%s.hide =\n", sg->name);
	}
	if (!b.data)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/state", dir);
	return write_file_atomic(path, b.data, b.len, 0600);
}

static void state_free(struct state *st)
{
	free(st->current);
	free(st->allow);
	for (size_t i = 0; i < st->hidden.n; i++)
		free(st->hidden.v[i]);
	free(st->hidden.v);
	sandbox_free(st->sb);
}

static int strv_push(struct strv *l, const char *s)
{
	char **v = realloc(l->v, (l->n + 2) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	l->v = v;
	if (!(v[l->n] = strdup(s)))
		return -ENOMEM;
	v[++l->n] = NULL;
	return 0;
}

static int state_read(const char *path, struct state *st)
{
	_cleanup_(buf_freep) struct buf b = BUF_INIT;
	char *line, *next;
	int r;

	memset(st, 0, sizeof(*st));
	r = sandbox_new(&st->sb);
	if (r < 0)
		return r;
	r = read_file(path, 1 << 20, &b);
	if (r < 0)
		return r;
	for (line = (char *)b.data; line && *line; line = next) {
		char *eq, *key, *v;
		uint64_t n;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (line[0] == '#' || !(eq = strstr(line, " =")))
			continue;
		*eq = '\0';
		key = line;
		v = eq + 2;
		while (*v == ' ')
			v++;
		r = 0;
		if (!strcmp(key, "pid")) {
			r = parse_uint(v, INT32_MAX, &n);
			st->pid = (pid_t)n;
		} else if (!strcmp(key, "start")) {
			r = parse_uint(v, UINT64_MAX, &st->start);
		} else if (!strcmp(key, "map_id")) {
			r = parse_uint(v, UINT32_MAX, &n);
			st->map_id = (uint32_t)n;
		} else if (!strcmp(key, "host")) {
			r = inet_pton(AF_INET, v, &st->host_ip) == 1 ? 0 : -EINVAL;
		} else if (!strcmp(key, "current")) {
			free(st->current);
			st->current = strdup(v);
			r = st->current ? 0 : -ENOMEM;
		} else if (!strcmp(key, "allow")) {
			struct sandbox_addr a, *l;

			r = policy_parse_addr(v, &a);
			if (r == 0) {
				l = realloc(st->allow, (st->n_allow + 1) * sizeof(*l));
				if (!l)
					return -ENOMEM;
				st->allow = l;
				l[st->n_allow++] = a;
			}
		} else if (!strcmp(key, "hidden")) {
			r = strv_push(&st->hidden, v);
		} else if (!strncmp(key, "stage.", 6)) {
			r = sandbox_set(st->sb, key, v);
		}
		if (r < 0)
			return log_error(-EINVAL, "state '%s': bad line '%s'", path, key);
	}
	if (!st->pid || !st->current)
		return log_error(-EINVAL, "state '%s': incomplete", path);
	return 0;
}

/* ---- covering a path inside a running sandbox --------------------------- */

/* Wait (up to 5 s) until the sandbox's init has pivoted into its own root:
 * before that, paths would resolve in the host's tree. */
static int wait_pivoted(pid_t pid)
{
	char p[64];
	struct stat host, sb;

	snprintf(p, sizeof(p), "/proc/%d/root", (int)pid);
	if (stat("/", &host) < 0)
		return -errno;
	for (int i = 0; i < 500; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		if (stat(p, &sb) < 0)
			return -errno;
		if (sb.st_dev != host.st_dev || sb.st_ino != host.st_ino)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -EAGAIN;
}

/* In a child: mount an empty, read-only, mode-000 tmpfs (or, over a file, an
 * empty mode-000 file from one) on path, resolved inside pid's root.  The
 * cover is made while the child is still in the host's mount namespace and
 * only then moved into the sandbox's: a detached mount tree is a mount
 * namespace of the caller's mount namespace's user namespace while it
 * lasts, and the sandbox's user namespace may have none (`namespaces`). */
static int cover_inside(pid_t pid, const char *path)
{
	char p[64];
	pid_t child;
	int st = wait_pivoted(pid);

	if (st < 0)
		return st;
	child = fork();
	if (child < 0)
		return -errno;
	if (child == 0) {
		struct open_how how = { .flags = O_PATH | O_CLOEXEC,
		                        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
		struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
		int root, mnt, fs, target, src;
		struct stat sst;

		snprintf(p, sizeof(p), "/proc/%d/root", (int)pid);
		root = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
		snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
		mnt = open(p, O_RDONLY | O_CLOEXEC);
		if (root < 0 || mnt < 0)
			_exit(10);
		target = (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
		if (target < 0)
			_exit(errno == ENOENT ? 0 : 11);   /* nothing to hide */
		if (fstat(target, &sst) < 0)
			_exit(11);
		fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
		if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "000", 0) < 0 ||
		    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "4k", 0) < 0 ||
		    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
			_exit(12);
		src = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
		                   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
		if (src < 0)
			_exit(13);
		if (!S_ISDIR(sst.st_mode)) {
			int f = openat(src, "hidden", O_CREAT | O_WRONLY | O_CLOEXEC, 0);

			if (f < 0)
				_exit(14);
			close(f);
			f = (int)syscall(SYS_open_tree, src, "hidden", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
			if (f < 0)
				_exit(14);
			src = f;
		}
		if (syscall(SYS_mount_setattr, src, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0)
			_exit(15);
		if (setns(mnt, CLONE_NEWNS) < 0)
			_exit(10);
		if (syscall(SYS_move_mount, src, "", target, "",
		            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			_exit(15);
		_exit(0);
	}
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return -EIO;
	return 0;
}

int netpolicy_stage_now(const struct sandbox_node *n, const char *name, char **ret_stage,
                        struct strv *ret_hidden)
{
	char dir[PATH_MAX], path[PATH_MAX + 8];
	_cleanup_close_ int lock = -1;
	_cleanup_(state_free) struct state st = { 0 };
	int r;

	if (strchr(name, '/') || name[0] == '.' || !name[0] || strlen(name) > 64)
		return log_error(-EINVAL, "bad sandbox name '%s'", name);
	snprintf(dir, sizeof(dir), "%s/%s", state_root(n), name);
	snprintf(path, sizeof(path), "%s/lock", dir);
	lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0)
		return errno == ENOENT ? -ENOENT : log_errno(-errno, "sandbox '%s': lock", name);
	if (flock(lock, LOCK_SH) < 0)
		return log_errno(-errno, "sandbox '%s': lock", name);
	snprintf(path, sizeof(path), "%s/state", dir);
	r = state_read(path, &st);
	if (r == -ENOENT)
		return r;
	if (r < 0)
		return log_errno(r, "sandbox '%s': state", name);
	*ret_stage = TAKE_PTR(st.current);
	*ret_hidden = st.hidden;
	st.hidden = (struct strv){ 0 };
	return 0;
}

/* ---- the launcher's side ------------------------------------------------ */

static int initial_allow(const struct sandbox *sb, const struct sandbox_addr **ret)
{
	const struct sandbox_stage *st = policy_start_stage(sb);

	if (st && st->has_allow) {
		*ret = st->allow;
		return (int)st->n_allow;
	}
	*ret = sb->allow;
	return (int)sb->n_allow;
}

int netpolicy_start_allow(const struct sandbox *sb)
{
	const struct sandbox_addr *allow;

	return initial_allow(sb, &allow);
}

int netpolicy_check(const struct sandbox *sb)
{
	const struct sandbox_stage *st = policy_start_stage(sb);
	const char *needs = NULL;

	if (sb->stage && !st)
		return log_error(-EINVAL, "policy: stage '%s' is not declared (stage.%s.allow or "
		                 "stage.%s.hide)", sb->stage, sb->stage, sb->stage);
	/* Without Landlock these fields would silently do nothing. */
	if (!sb->landlock) {
		if (sb->hide.n || (st && st->hide.n))
			needs = "hide";
		else if (sb->read_only.n)
			needs = "read_only";
		else if (sb->writable_set)
			needs = "writable";
		else if (!sb->tcp_bind.any)
			needs = "tcp_bind";
		else if (!sb->tcp_connect.any)
			needs = "tcp_connect";
		if (needs)
			return log_error(-EINVAL, "policy: %s needs landlock = true", needs);
	}
	return 0;
}

int netpolicy_setup(const struct sandbox *sb, const char *name, pid_t pid, const char *cgroup2,
                    struct net_state *ns)
{
	static const struct { enum bpf_attach_type type; bool v6; const char *name; } hooks[] = {
		{ BPF_CGROUP_INET4_CONNECT, false, "lr_connect4" },
		{ BPF_CGROUP_INET6_CONNECT, true, "lr_connect6" },
		{ BPF_CGROUP_UDP4_SENDMSG, false, "lr_sendmsg4" },
		{ BPF_CGROUP_UDP6_SENDMSG, true, "lr_sendmsg6" },
	};
	const struct sandbox_addr *allow;
	int n_allow = initial_allow(sb, &allow), r;
	_cleanup_close_ int cgfd = -1;

	if (n_allow > 0) {
		if (!cgroup2)
			return log_error(-EOPNOTSUPP, "network allowlist: needs a cgroup2 hierarchy for "
			                 "its BPF programs");
		r = veth_setup(ns, pid);
		if (r < 0)
			return r;
		ns->map_fd = map_create();
		if (ns->map_fd < 0)
			return ns->map_fd;
		for (int i = 0; i < n_allow; i++) {
			struct allow_key k;

			key_of(&allow[i], ns->host_ip, &k);
			r = map_update(ns->map_fd, &k);
			if (r < 0)
				return log_errno(r, "network allowlist: add an entry");
		}
		cgfd = open(cgroup2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0)
			return log_errno(-errno, "cgroup '%s'", cgroup2);
		for (size_t i = 0; i < ARRAY_SIZE(hooks); i++) {
			union bpf_attr a = { 0 };
			_cleanup_close_ int prog = prog_load(ns->map_fd, hooks[i].v6, hooks[i].type,
			                                     hooks[i].name);

			if (prog < 0)
				return prog;
			a.link_create.prog_fd = (uint32_t)prog;
			a.link_create.target_fd = (uint32_t)cgfd;
			a.link_create.attach_type = hooks[i].type;
			r = (int)sys_bpf(BPF_LINK_CREATE, &a);
			if (r < 0)
				return log_errno(-errno, "network allowlist: attach %s to '%s'",
				                 hooks[i].name, cgroup2);
			ns->links[ns->n_links++] = r;
		}
	}
	if (sb->n_stages) {
		struct state st = { .pid = pid, .start = start_time(pid), .host_ip = ns->host_ip,
		                    .sb = (struct sandbox *)sb };
		const struct sandbox_stage *sg = policy_start_stage(sb);
		struct strv hidden;

		if (ns->map_fd >= 0) {
			struct bpf_map_info info = { 0 };
			union bpf_attr a = { 0 };

			a.info.bpf_fd = (uint32_t)ns->map_fd;
			a.info.info_len = sizeof(info);
			a.info.info = (uint64_t)(uintptr_t)&info;
			if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
				return log_errno(-errno, "network allowlist: map id");
			st.map_id = info.id;
		}
		r = policy_hidden(sb, &hidden);
		if (r < 0)
			return r;
		st.hidden = hidden;
		st.current = sg->name;
		st.allow = (struct sandbox_addr *)allow;
		st.n_allow = (size_t)n_allow;
		if (asprintf(&ns->state_dir, "%s/%s", state_root(&sb->node), name) < 0) {
			ns->state_dir = NULL;
			free(hidden.v);
			return -ENOMEM;
		}
		r = mkdir_p(state_root(&sb->node), 0755);
		if (r == 0 && mkdir(ns->state_dir, 0700) < 0)
			r = -errno;
		if (r < 0) {
			free(hidden.v);
			r = log_errno(r, "sandbox state '%s'", ns->state_dir);
			free(ns->state_dir);
			ns->state_dir = NULL;
			return r;
		}
		r = state_write(ns->state_dir, &st);
		free(hidden.v);
		if (r < 0)
			return log_errno(r, "sandbox state '%s'", ns->state_dir);
	}
	return 0;
}

void netpolicy_teardown(struct net_state *ns)
{
	char path[PATH_MAX];

	for (int i = 0; i < ns->n_links; i++)
		close(ns->links[i]);
	ns->n_links = 0;
	if (ns->map_fd >= 0)
		close(ns->map_fd);
	ns->map_fd = -1;
	if (ns->veth[0])
		veth_delete(ns->veth);
	ns->veth[0] = '\0';
	if (ns->state_dir) {
		snprintf(path, sizeof(path), "%s/state", ns->state_dir);
		unlink(path);
		snprintf(path, sizeof(path), "%s/lock", ns->state_dir);
		unlink(path);
		rmdir(ns->state_dir);
		free(ns->state_dir);
		ns->state_dir = NULL;
	}
}

/* ---- `lazyroot policy NAME --stage STAGE` ------------------------------- */

static int open_map(uint32_t id)
{
	union bpf_attr a = { 0 };
	struct bpf_map_info info = { 0 };
	_cleanup_close_ int fd = -1;

	a.map_id = id;
	fd = (int)sys_bpf(BPF_MAP_GET_FD_BY_ID, &a);
	if (fd < 0)
		return -errno;
	memset(&a, 0, sizeof(a));
	a.info.bpf_fd = (uint32_t)fd;
	a.info.info_len = sizeof(info);
	a.info.info = (uint64_t)(uintptr_t)&info;
	if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
		return -errno;
	if (strcmp(info.name, MAP_NAME) || info.key_size != sizeof(struct allow_key))
		return -ESTALE;
	return TAKE_FD(fd);
}

int sandbox_stage_switch(const struct sandbox_node *n, const char *name, const char *stage,
                         char **ret_current)
{
	char dir[PATH_MAX], path[PATH_MAX + 8];
	_cleanup_close_ int lock = -1, map = -1;
	_cleanup_(state_free) struct state st = { 0 };
	const struct sandbox_stage *sg = NULL;
	const struct sandbox_addr *next;
	size_t n_next;
	int r;

	if (strchr(name, '/') || name[0] == '.' || !name[0] || strlen(name) > 64)
		return log_error(-EINVAL, "policy: bad sandbox name '%s'", name);
	snprintf(dir, sizeof(dir), "%s/%s", state_root(n), name);
	snprintf(path, sizeof(path), "%s/lock", dir);
	lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0) {
		if (errno == ENOENT)
			return log_error(-ENOENT, "sandbox '%s' is not running or declares no stages",
			                 name);
		return log_errno(-errno, "sandbox '%s': lock", name);
	}
	if (flock(lock, LOCK_EX) < 0)
		return log_errno(-errno, "sandbox '%s': lock", name);
	snprintf(path, sizeof(path), "%s/state", dir);
	r = state_read(path, &st);
	if (r == -ENOENT)
		return log_error(r, "sandbox '%s' is not running", name);
	if (r < 0)
		return log_errno(r, "sandbox '%s': state", name);
	if (!st.start || start_time(st.pid) != st.start)
		return log_error(-ESRCH, "sandbox '%s' is not running", name);
	if (ret_current && !stage) {
		*ret_current = strdup(st.current);
		return *ret_current ? 0 : -ENOMEM;
	}
	for (size_t i = 0; i < st.sb->n_stages; i++)
		if (!strcmp(st.sb->stages[i].name, stage))
			sg = &st.sb->stages[i];
	if (!sg)
		return log_error(-EINVAL, "sandbox '%s' has no stage '%s'", name, stage);

	next = sg->has_allow ? sg->allow : st.allow;
	n_next = sg->has_allow ? sg->n_allow : st.n_allow;
	for (size_t i = 0; i < n_next; i++)
		if (!addr_in(&next[i], st.allow, st.n_allow)) {
			char a[96];

			addr_text(&next[i], a, sizeof(a));
			return log_error(-EPERM, "stage '%s' would allow %s, which stage '%s' does not: "
			                 "a stage can only tighten", stage, a, st.current);
		}
	/* The network first: refused from the next connect on. */
	if (st.map_id) {
		map = open_map(st.map_id);
		if (map < 0)
			return log_errno(map, "sandbox '%s': its allowlist map %u", name, st.map_id);
	}
	for (size_t i = 0; i < st.n_allow; i++) {
		struct allow_key k;

		if (addr_in(&st.allow[i], next, n_next) || map < 0)
			continue;
		key_of(&st.allow[i], st.host_ip, &k);
		r = map_delete(map, &k);
		if (r < 0)
			return log_errno(r, "sandbox '%s': update its allowlist", name);
	}
	for (size_t i = 0; i < sg->hide.n; i++) {
		bool done = false;

		for (size_t j = 0; j < st.hidden.n; j++)
			done |= !strcmp(st.hidden.v[j], sg->hide.v[i]);
		if (done)
			continue;
		r = cover_inside(st.pid, sg->hide.v[i]);
		if (r < 0)
			return log_errno(r, "sandbox '%s': hide '%s'", name, sg->hide.v[i]);
		r = strv_push(&st.hidden, sg->hide.v[i]);
		if (r < 0)
			return r;
	}
	if (next != st.allow) {
		struct sandbox_addr *copy = n_next ? malloc(n_next * sizeof(*copy)) : NULL;

		if (n_next && !copy)
			return -ENOMEM;
		if (n_next)
			memcpy(copy, next, n_next * sizeof(*copy));
		free(st.allow);
		st.allow = copy;
		st.n_allow = n_next;
	}
	free(st.current);
	st.current = strdup(stage);
	if (!st.current)
		return -ENOMEM;
	r = state_write(dir, &st);
	if (r < 0)
		return log_errno(r, "sandbox '%s': state", name);
	if (ret_current)
		*ret_current = strdup(stage);
	return 0;
}
