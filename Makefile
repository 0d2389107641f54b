# takana: `make` builds takana/core.so; `make test` installs what is missing,
# builds and runs the specs. Variables follow luarocks' make conventions.

LUA ?= lua5.4
LUA_VERSION ?= 5.4
LUA_INCDIR ?= /usr/include/lua$(LUA_VERSION)
CC ?= cc
CFLAGS ?= -O2 -g
LIBFLAG ?= -shared
PREFIX ?= /usr/local
INST_LIBDIR ?= $(PREFIX)/lib/lua/$(LUA_VERSION)
INST_LUADIR ?= $(PREFIX)/share/lua/$(LUA_VERSION)
INST_BINDIR ?= $(PREFIX)/bin
BUSTED ?= $(LUA) /usr/bin/busted

OUT := .output
WARN := -Wall -Wextra -pedantic -Wshadow -Wcast-qual -Wcast-align \
	-Wstrict-prototypes -Wmissing-prototypes -Wmissing-declarations \
	-Wpointer-arith -Wwrite-strings -Wundef -Wredundant-decls \
	-Wnested-externs -Wformat=2 -Wdisabled-optimization
ifeq ($(WERROR),1)
WARN += -Werror
endif
# The core (csrc/core) is built without Lua's headers on its path, so it
# cannot include them; the bindings (csrc/lua) see both. -MMD: each object
# depends on the headers it includes, no more.
TK_CFLAGS := -std=gnu11 -fPIC -fvisibility=hidden $(WARN) -MMD -MP -Icsrc/core -Ibpf $(CFLAGS)
BIND_CFLAGS := -I$(LUA_INCDIR) -Icsrc/lua

# BPF=0 builds without clang, bpftool and libbpf: /proc is then the only
# snapshot backend and takana.probe() says "built without BPF".
BPF ?= 1
CLANG ?= clang
LLVM_STRIP ?= llvm-strip
BPFTOOL ?= $(shell command -v bpftool || echo /usr/sbin/bpftool)

CORE_SRC := $(sort $(wildcard csrc/core/*.c))
BIND_SRC := $(sort $(wildcard csrc/lua/*.c))
OBJS := $(patsubst csrc/%.c,$(OUT)/%.o,$(CORE_SRC) $(BIND_SRC))
HDRS := $(wildcard csrc/core/*.h bpf/*.h)
BPF_PROGS := kfunc iter events argv
# argv is sleepable, which a light skeleton cannot say (the section name
# "syscall.s" is newer than Debian 12's libbpf): libbpf's skeleton only.
LIGHT_PROGS := kfunc iter events
ifeq ($(BPF),0)
TK_CFLAGS += -DTK_NO_BPF
SKELS :=
else
TK_CFLAGS += -I$(OUT) $(if $(LIBBPF_INCDIR),-I$(LIBBPF_INCDIR))
LIBS += $(if $(LIBBPF_LIBDIR),-L$(LIBBPF_LIBDIR)) -lbpf
SKELS := $(patsubst %,$(OUT)/takana_%.skel.h,$(BPF_PROGS)) \
	$(patsubst %,$(OUT)/takana_%.lskel.h,$(LIGHT_PROGS))
endif

all: takana/core.so

$(OUT):
	@mkdir -p $@

# Rebuild everything when the build mode changes (BPF=0 vs BPF=1).
$(OUT)/config: FORCE | $(OUT)
	@echo "BPF=$(BPF) CFLAGS=$(CFLAGS)" | cmp -s - $@ || echo "BPF=$(BPF) CFLAGS=$(CFLAGS)" > $@

$(OUT)/core/%.o: csrc/core/%.c $(OUT)/config | $(OUT)
	@mkdir -p $(@D); echo "  CC $<"; $(CC) $(TK_CFLAGS) -c $< -o $@

$(OUT)/lua/%.o: csrc/lua/%.c $(OUT)/config | $(OUT)
	@mkdir -p $(@D); echo "  CC $<"; $(CC) $(TK_CFLAGS) $(BIND_CFLAGS) -c $< -o $@

# The skeletons are generated: every object waits for them (a first build
# has no .d files to say which include them).
$(OBJS): $(SKELS)
-include $(OBJS:.o=.d)

# BPF objects: CO-RE against bpf/vmlinux_min.h, never the build host's BTF;
# DWARF stripped, BTF kept; embedded in the module as libbpf skeletons.
$(OUT)/takana_%.bpf.o: bpf/takana_%.bpf.c $(wildcard bpf/*.h) | $(OUT)
	@echo "  BPF $<"; $(CLANG) -g -O2 -target bpf -Wall -Werror -Ibpf -c $< -o $@ && $(LLVM_STRIP) -g $@

# Kept (not deleted as intermediates): `bpftool prog loadall` reads them
# when a kernel refuses a program.
.SECONDARY: $(patsubst %,$(OUT)/takana_%.bpf.o,$(BPF_PROGS))

$(OUT)/takana_%.skel.h: $(OUT)/takana_%.bpf.o
	@echo "  GEN $@"; $(BPFTOOL) gen skeleton $< name takana_$* > $@

# Light skeletons of the same objects: a loader program does the CO-RE
# relocation and the BTF lookups in the kernel, against the kernel's own
# parsed BTF, so the process never reads /sys/kernel/btf/vmlinux (5.5 MB).
# Tried first; the libbpf skeleton above is the fallback (bpf_load.c).
$(OUT)/takana_%.lskel.h: $(OUT)/takana_%.bpf.o
	@echo "  GEN $@"; $(BPFTOOL) gen skeleton -L $< name takana_$*_light > $@

takana/core.so: $(OBJS)
	@mkdir -p takana
	$(CC) $(LIBFLAG) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(LIBS) -pthread

bench/takana_bench.so: bench/takana_bench.c $(CORE_SRC) $(HDRS) $(SKELS) $(OUT)/config
	$(CC) $(filter-out -fvisibility=hidden -MMD -MP,$(TK_CFLAGS)) -I$(LUA_INCDIR) -shared -o $@ bench/takana_bench.c $(CORE_SRC) $(LIBS) -pthread

bench/cgroup_floor: bench/cgroup_floor.c
	$(CC) -std=gnu11 -O2 $(WARN) -o $@ $<

spec/fixture: spec/fixture.c
	$(CC) -std=gnu11 -O2 $(WARN) -pthread -o $@ $<

spec/envtool.so: spec/envtool.c
	$(CC) -std=gnu11 -O2 -fPIC -shared $(WARN) -I$(LUA_INCDIR) -o $@ $<

deps:
	@sh .ci/deps

# The README's test command.
test: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	$(BUSTED) $(BUSTED_FLAGS)

# The edit loop: the suite without the specs tagged #slow (stress loops,
# storms, the luarocks build, the supervisor's timeouts); `make test` runs
# them all. Tags (in describe/it names): #slow, #root (pending without
# root), #bpf (pending without BPF), #guest (pending but in the pure
# cgroup2 guests of make test-kernels); e.g. BUSTED_FLAGS=--tags=bpf.
test-fast: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	$(BUSTED) $(BUSTED_FLAGS) --exclude-tags=slow

# The same suite as uid 65534 from a world-readable copy: proves the fallbacks.
test-unpriv: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	sh .ci/unpriv $(BUSTED) $(BUSTED_FLAGS)

# The suite with the module built with ASan + UBSan; any report fails.
test-asan: deps
	sh .ci/asan $(BUSTED) $(BUSTED_FLAGS)

# The suite with the collector running every 1,000 instructions.
test-gc: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	TAKANA_GC_STRESS=1 TAKANA_STRESS_SCALE=0.1 $(BUSTED) $(BUSTED_FLAGS)

# The C-heavy specs under valgrind memcheck; errors or definite leaks fail.
test-valgrind: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	sh .ci/valgrind $(BUSTED) $(BUSTED_FLAGS)

# The suite inside Debian's 6.1 and 6.12 kernels under qemu, on pure cgroup2
# with a soft descriptor limit of 1,024 (root on both, uid 65534 split between them).
test-kernels: deps
	sh .ci/kernels

# The same suite against a build without BPF: /proc must carry everything.
test-nobpf: deps
	sh .ci/nobpf $(BUSTED) $(BUSTED_FLAGS)

# The leak specs at the full 100,000 iterations for every call (CI runs the
# slow ones 10,000 times); prints descriptors and Lua memory per call.
soak: deps
	$(MAKE) WERROR=1 all spec/fixture spec/envtool.so
	TAKANA_SOAK=1 $(BUSTED) $(BUSTED_FLAGS) --filter='100,000' spec/80-stress_spec.lua

# bench/events.lua's bare-C reader: takana's own BPF object, no takana.
bench/events_reader: bench/events_reader.c $(HDRS) $(SKELS) $(OUT)/config
	$(CC) -std=gnu11 -Wall -Wextra -O2 $(filter -I% -D%,$(TK_CFLAGS)) -o $@ bench/events_reader.c $(LIBS)

bench: deps all bench/takana_bench.so bench/cgroup_floor bench/events_reader spec/fixture
	$(LUA) bench/snapshot.lua
	$(LUA) bench/spawn.lua
	$(LUA) bench/cgroup.lua
	$(LUA) bench/events.lua
	$(LUA) bench/psutil.lua
	$(LUA) bench/supervise.lua
	$(LUA) bench/logflood.lua
	$(LUA) bench/coldstart.lua
	$(LUA) bench/command.lua
	$(LUA) bench/examples.lua

# The main job on this machine: what the host offers, then every process.
RUN_ENV = LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./?.so;;"
run: deps all
	$(RUN_ENV) $(LUA) bin/takana probe
	$(RUN_ENV) $(LUA) bin/takana ps --tree

# libFuzzer harnesses for every parser and the pid-order sort; `make fuzz FUZZ_SECONDS=600` runs
# each that long from the committed seed corpus (fuzz/corpus/<name>).
FUZZ_SECONDS ?= 60
FUZZ_NAMES := stat kv cn order procinfo safedir cmsg host
# The whole core, built without BPF (no libbpf in the harnesses).
FUZZ_SRC := $(CORE_SRC)
fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_SRC) $(HDRS)
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DTK_NO_BPF \
		-Icsrc/core -Ibpf -o $@ $< $(FUZZ_SRC)

# Two at a time (each harness is one busy thread): FUZZ_SECONDS each, half
# the wall time of one after another on CI's two cores.
FUZZ_JOBS ?= 2
fuzz: deps $(patsubst %,fuzz/fuzz_%,$(FUZZ_NAMES))
	@for f in $(FUZZ_NAMES); do mkdir -p fuzz/out/$$f; echo $$f; done | \
		xargs -P $(FUZZ_JOBS) -I{} sh -c './fuzz/fuzz_{} -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			fuzz/out/{} fuzz/corpus/{} 2>fuzz/out/{}.log || { echo "fuzz {}: failed"; tail -40 fuzz/out/{}.log; exit 1; }'; \
	st=$$?; \
	for f in $(FUZZ_NAMES); do \
		echo "fuzz $$f: $(FUZZ_SECONDS) s"; \
		grep -E "stat::number_of_executed_units|stat::peak_rss" fuzz/out/$$f.log; \
	done; \
	exit $$st

# luacheck, cppcheck, clang-tidy and luarocks lint; any finding fails.
lint: deps all
	sh .ci/lint

# The LDoc API reference, from the comments in lua/takana/ and csrc/lua/
# (lua-ldoc), written to doc/api/ (config.ld); doc/*.md are kept sources.
doc:
	sh .ci/ldoc .

# The schema blocks of doc/reference.md and of the LDoc comments, from the schemas
# (tools/docgen.lua; spec/89-doc fails while one is out of date).
docgen: all
	$(RUN_ENV) $(LUA) tools/docgen.lua

# What makes the installed command start fast (issue 26):
# - the modules go in as bytecode (tools/precompile.lua: compiling them was
#   most of a short command's time); PRECOMPILE=0 installs the sources;
# - bin/takana's first line names the interpreter by its full path
#   (luarocks passes its own as LUA), where `#!/usr/bin/env lua5.4` cost
#   an exec of env, its locale set-up and a PATH search, 0.5 ms a command.
PRECOMPILE ?= 1
LUA_BIN := $(filter /%,$(shell command -v $(LUA) 2>/dev/null))
LUA_STAGE := $(if $(filter 0,$(PRECOMPILE)),lua,$(OUT)/luac)

install: all
	install -d $(DESTDIR)$(INST_LIBDIR)/takana $(DESTDIR)$(INST_LUADIR)/takana/supervisor $(DESTDIR)$(INST_BINDIR)
	install -m 755 takana/core.so $(DESTDIR)$(INST_LIBDIR)/takana/core.so
ifneq ($(PRECOMPILE),0)
	rm -rf $(OUT)/luac
	$(LUA) tools/precompile.lua $(OUT)/luac lua/takana/*.lua lua/takana/supervisor/*.lua
endif
	install -m 644 $(LUA_STAGE)/takana/*.lua $(DESTDIR)$(INST_LUADIR)/takana/
	install -m 644 $(LUA_STAGE)/takana/supervisor/*.lua $(DESTDIR)$(INST_LUADIR)/takana/supervisor/
	install -d $(DESTDIR)$(INST_LUADIR)/takana/examples
	install -m 644 examples/*.lua $(DESTDIR)$(INST_LUADIR)/takana/examples/
	sed '$(if $(LUA_BIN),1s|^#!.*|#!$(LUA_BIN)|)' bin/takana > $(OUT)/takana.bin
	install -m 755 $(OUT)/takana.bin $(DESTDIR)$(INST_BINDIR)/takana

clean:
	rm -rf $(OUT) takana bench/takana_bench.so bench/cgroup_floor bench/events_reader spec/fixture spec/envtool.so doc/api fuzz/out \
		$(patsubst %,fuzz/fuzz_%,$(FUZZ_NAMES))

.PHONY: FORCE fuzz lint doc docgen all deps test test-fast test-unpriv test-nobpf test-asan test-valgrind test-gc soak bench run install clean
.DELETE_ON_ERROR:

# The thread specs against a module built with ThreadSanitizer (.ci/tsan);
# any report fails. Pass TSAN_SPECS to widen the set.
TSAN_SPECS ?= spec/86-threads_spec.lua spec/05-bpf_snapshot_spec.lua
test-tsan: deps
	sh .ci/tsan $(BUSTED) $(BUSTED_FLAGS) $(TSAN_SPECS)
.PHONY: test-tsan
