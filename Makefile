# lazyroot — plain Makefile.  `make`, `make test`, `make asan`, `make install`, `make bench`.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
# the full program beside the front (tools/main.c finds it from BINDIR as ../libexec)
LIBEXECDIR = $(BINDIR)/../libexec
SYSTEMDDIR ?= /lib/systemd/system
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
DESTDIR ?=
PKG_CONFIG ?= pkg-config
CC ?= cc
CFLAGS ?= -O2 -g
BUILD ?= build
# The release; `lazyroot --version` adds the commit it was built from, when built from a
# git checkout (lib/version.c, from $(BUILD)/version.h below).
VERSION = 0.1.0

WARN = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla \
       -Wno-unused-parameter
ifneq ($(CI),)
WERROR ?= 1
endif
ifeq ($(WERROR),1)
WARN += -Werror
endif
ifeq ($(SAN),1)
override CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
override LDFLAGS += -fsanitize=address,undefined
endif

PKGS = fuse3 liburing libzstd libcurl zlib jansson libcrypto libmicrohttpd
# libcurl, libcrypto and libmicrohttpd are not linked: store/curl-dl.c, lib/crypto-dl.c
# and node/mhd-dl.c load them on first use (at every exec otherwise libcurl costs ~4.5 ms
# of CPU, libcrypto 0.28 ms static and 0.87 ms shared, libmicrohttpd with GnuTLS 1.8 ms:
# docs/perf-log.md), so only their headers are needed here.
LINKED_PKGS = $(filter-out libcurl libcrypto libmicrohttpd,$(PKGS))
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
# The other libraries are linked statically into the full program (STATIC_LIBS=0: shared):
# each shared library costs every exec relocation work, ~0.25 ms of CPU for five of them (measured before jansson joined).
# Its libc stays shared (dlopen needs it); `run`'s front (FRONT below) is static whole.
STATIC_LIBS ?= 1
ifeq ($(STATIC_LIBS),1)
PKG_LIBS := $(shell $(PKG_CONFIG) --libs-only-L $(LINKED_PKGS) 2>/dev/null) -Wl,-Bstatic \
	$(filter-out -lpthread,$(shell $(PKG_CONFIG) --libs-only-l $(LINKED_PKGS) 2>/dev/null)) \
	-Wl,-Bdynamic -ldl
else
PKG_LIBS := $(shell $(PKG_CONFIG) --libs $(LINKED_PKGS) 2>/dev/null) -ldl
endif

override CFLAGS += -std=gnu11 $(WARN) -MMD -MP -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. $(PKG_CFLAGS)
LIBS = $(PKG_LIBS) -lpthread -lm

ifeq ($(V),1)
Q =
else
Q = @
endif

MODULES = lib image chunker store cache fs sandbox node
CORE_SRCS = $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
CORE_OBJS = $(CORE_SRCS:%.c=$(BUILD)/%.o)
TOOL_SRCS = $(wildcard tools/*.c)
TOOL_OBJS = $(TOOL_SRCS:%.c=$(BUILD)/%.o)
UNIT_SRCS = $(wildcard tests/unit/test_*.c)
UNIT_BINS = $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
HELPER_SRCS = $(wildcard tests/helpers/*.c)
HELPER_BINS = $(HELPER_SRCS:tests/helpers/%.c=$(BUILD)/tests/%)
PROG_SRCS = $(wildcard tests/progs/*.c)
PROG_BINS = $(PROG_SRCS:tests/progs/%.c=$(BUILD)/tests/progs/%)

# The pkg-config flags above are computed when make reads this file, so the packages that
# provide them are installed first, and a second make, reading the file afresh, builds.
all: deps-check
	$(Q)$(MAKE) --no-print-directory bin

# (`@:`: nothing to say when everything is built)
bin: $(BUILD)/lazyroot
	@:

deps-check:
	$(Q)scripts/install-deps build

$(BUILD)/liblazyroot.a: $(CORE_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# Symbols bound at load and the GOT made read-only (full RELRO): a root launcher's
# hardening, and a fork of it (a sandbox's init) looks up no symbol of its own.
BIN_LDFLAGS = -Wl,-z,relro,-z,now

# FRONT=1: `lazyroot` is the static front of tools/main.c, which runs `run` itself and
# execs the full program, $(BUILD)/libexec/lazyroot, for every other command.  Static-pie,
# so that the launcher keeps its address randomization.  Sanitizer builds cannot link
# static: there `lazyroot` is the full program.
FRONT ?= 1
ifeq ($(SAN),1)
override FRONT = 0
endif
# `run` and what it needs of tools/: no store, no FUSE, no libcurl.  It speaks to the node
# (`run IMAGE`), so it links jansson, statically like everything in it.
FRONT_OBJS = $(BUILD)/tools/main-front.o $(addprefix $(BUILD)/tools/,run.o common.o images.o client.o)
FRONT_LIBS := $(shell $(PKG_CONFIG) --libs-only-l jansson 2>/dev/null)

ifeq ($(FRONT),1)
FULL = $(BUILD)/libexec/lazyroot

$(BUILD)/lazyroot: $(FRONT_OBJS) $(BUILD)/liblazyroot.a | $(FULL)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $(BIN_LDFLAGS) -static-pie -o $@ $(FRONT_OBJS) $(BUILD)/liblazyroot.a $(FRONT_LIBS) -lpthread -lm

$(BUILD)/tools/main-front.o: tools/main.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) -DLAZYROOT_FRONT -c -o $@ $<
else
FULL = $(BUILD)/lazyroot
endif

$(FULL): $(TOOL_OBJS) $(BUILD)/liblazyroot.a
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $(BIN_LDFLAGS) -o $@ $(TOOL_OBJS) $(BUILD)/liblazyroot.a $(LIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# The seccomp filter is written as BPF when lazyroot is built (sandbox/gen/seccomp.c,
# from its own table) into a header that sandbox/seccomp.c loads: nothing is compiled
# at a launch.
$(BUILD)/seccomp-gen: sandbox/gen/seccomp.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

$(BUILD)/sandbox/seccomp-bpf.h: $(BUILD)/seccomp-gen
	@mkdir -p $(@D)
	@echo "  GEN     $@"
	$(Q)$< >$@.tmp && mv $@.tmp $@

$(BUILD)/sandbox/seccomp.o: $(BUILD)/sandbox/seccomp-bpf.h
$(BUILD)/sandbox/seccomp.o: override CFLAGS += -I$(BUILD)

# The version and the commit (with "-dirty" when tracked files differ from it), written
# at every make but replaced only when they change, so that only lib/version.o is rebuilt
# after a commit.  Outside a git checkout the commit is empty.
$(BUILD)/version.h: FORCE
	@mkdir -p $(@D)
	$(Q)c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && \
		{ git diff --quiet HEAD -- 2>/dev/null || c=$$c-dirty; } || c=; \
		printf '#define LAZYROOT_VERSION "%s"\n#define LAZYROOT_COMMIT "%s"\n' '$(VERSION)' "$$c" >$@.tmp; \
		if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

$(BUILD)/lib/version.o: $(BUILD)/version.h
$(BUILD)/lib/version.o: override CFLAGS += -I$(BUILD)

$(BUILD)/tests/test_%: tests/unit/test_%.c $(BUILD)/liblazyroot.a
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/liblazyroot.a $(LIBS) -lcmocka

# Test helpers (treecmp, ...) stand alone: they build and run even while the core does not.
$(BUILD)/tests/%: tests/helpers/%.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $<

# Test programs over the library (tests/progs): calls the integration tests drive before a
# command makes them (sbenter: sandbox_enter into a running sandbox; sbfiles: the file
# transfers in a confined process).
$(BUILD)/tests/progs/%: tests/progs/%.c $(BUILD)/liblazyroot.a
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/liblazyroot.a $(LIBS)

# Benchmark helpers (bench/*/*.c): small programs that bench/*/run start.
BENCH_SRCS = $(wildcard bench/*/*.c)
BENCH_BINS = $(foreach f,$(BENCH_SRCS),$(BUILD)/bench/$(basename $(notdir $(f))))
$(BUILD)/bench/%: bench/*/%.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIBS)

# Attack programs run inside sandboxes: static (any root filesystem), never sanitized.
ATTACK_SRCS = $(wildcard tests/sandbox/*.c)
ATTACK_BINS = $(ATTACK_SRCS:tests/sandbox/%.c=$(BUILD)/tests/sandbox/%)
$(BUILD)/tests/sandbox/%: tests/sandbox/%.c $(wildcard tests/sandbox/*.h)
	@mkdir -p $(@D)
	@echo "  CC      $@"
	$(Q)$(CC) -O2 -g -std=gnu11 $(WARN) -static -o $@ $<

# The modules depend on each other only downwards (docs/HACKING.md, "Dependency
# direction"): what each includes, and a link of each module's objects with only
# the archives of the modules below it.
check-layers: $(CORE_OBJS) $(TOOL_OBJS)
	$(Q)BUILD=$(BUILD) CC="$(CC)" LDFLAGS="$(LDFLAGS)" OBJS="$^" LIBS="$(LIBS)" scripts/check-layers

tests-build: $(BUILD)/lazyroot $(UNIT_BINS) $(HELPER_BINS) $(PROG_BINS) $(ATTACK_BINS) $(BENCH_BINS)
	@:

# The whole suite: unit tests and integration tests against the real binary, TEST_JOBS at a
# time (tests/run: by default as many as CPUs; `make test -j2` or TEST_JOBS=2 says how many).
TEST_JOBS ?= $(lastword $(filter-out -j,$(filter -j%,$(MAKEFLAGS))))
test: deps-check-test
	$(Q)$(MAKE) --no-print-directory tests-build
	$(Q)BUILD=$(BUILD) tests/run $(if $(TEST_JOBS),-j $(patsubst -j%,%,$(TEST_JOBS)))

deps-check-test:
	$(Q)scripts/install-deps test

# The sanitizers look for memory errors, not for rare interleavings: the node tests'
# kill and upgrade loops and image counts are cut to a quarter there (the plain run
# does the full counts), which keeps CI's two whole-suite runs within its time.
asan:
	$(Q)NODE_KILLS=5 NODE_UPGRADES=5 NODE_IMAGES=50 \
		$(MAKE) --no-print-directory BUILD=build-asan SAN=1 CFLAGS="-O1 -g" test

# libFuzzer targets (clang); run each for a short while: make fuzz FUZZ_SECONDS=60
FUZZ_SECONDS ?= 30
FUZZ_SRCS = $(wildcard tests/fuzz/fuzz_*.c)
fuzz:
	$(Q)for f in $(FUZZ_SRCS); do \
		n=$$(basename $$f .c); \
		$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang SAN=1 CFLAGS="-O1 -g -fsanitize=fuzzer-no-link" build-fuzz/liblazyroot.a || exit 1; \
		clang -O1 -g -fsanitize=fuzzer,address,undefined -std=gnu11 -D_GNU_SOURCE -I. $$f build-fuzz/liblazyroot.a $(LIBS) -o build-fuzz/$$n || exit 1; \
		mkdir -p build-fuzz/corpus-$$n; \
		build-fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -close_fd_mask=2 build-fuzz/corpus-$$n tests/fuzz/corpus/$$n || exit 1; \
	done

bench:
	$(Q)scripts/install-deps bench
	$(Q)$(MAKE) --no-print-directory bench-build
	$(Q)for b in bench/*/run; do \
		BENCH_SUMMARY=bench/results/$$(basename $$(dirname $$b)).jsonl BUILD=$(BUILD) $$b || exit 1; \
	done
	$(Q)bench/report

MAN_PAGES = $(wildcard man/*.1)

bench-build: $(BUILD)/lazyroot $(BENCH_BINS)
	@:

install: $(BUILD)/lazyroot
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR)
	install -m 0755 $(BUILD)/lazyroot $(DESTDIR)$(BINDIR)/lazyroot
	if [ $(FRONT) = 1 ]; then install -d $(DESTDIR)$(LIBEXECDIR)/lazyroot && \
		install -m 0755 $(FULL) $(DESTDIR)$(LIBEXECDIR)/lazyroot/lazyroot; fi
	install -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 completion/lazyroot.bash $(DESTDIR)$(BASHCOMPDIR)/lazyroot
	test -e $(DESTDIR)/etc/lazyroot/node.conf || { install -d $(DESTDIR)/etc/lazyroot && $(BUILD)/lazyroot config --defaults >$(DESTDIR)/etc/lazyroot/node.conf; }
	install -d $(DESTDIR)$(SYSTEMDDIR)
	sed 's|@BINDIR@|$(BINDIR)|g' dist/lazyroot-node.service >$(DESTDIR)$(SYSTEMDDIR)/lazyroot-node.service

clean:
	rm -rf build build-asan build-fuzz

FORCE:

.PHONY: FORCE all bin check-layers test asan fuzz bench bench-build install clean deps-check deps-check-test tests-build

-include $(CORE_OBJS:.o=.d) $(TOOL_OBJS:.o=.d) $(BUILD)/tools/main-front.d $(BUILD)/seccomp-gen.d $(UNIT_BINS:=.d) $(HELPER_BINS:=.d) $(PROG_BINS:=.d) $(BENCH_BINS:=.d)
