# mha: multi-head attention, exactly.  See README.md.
#
#   make              build ./mha, lib/libmha.a and .so, engine/libmhe.a and .so
#   make demo         install what is missing (Debian, as root), build, run a sample
#   make check        install what is missing, build with -Werror, run every test
#   make conformance  the ONNX Attention cases (../shared/conformance/onnx-attention-opset25)
#                     and RotaryEmbedding cases (../shared/conformance/onnx-rotary-embedding)
#   make check-browser  the -o attn.html page in headless Chromium (installs chromium)
#   make check-arm64  cross-build for arm64, its tests under qemu-user (docs/platforms.md)
#   make check-clang  build with clang for x86-64 and arm64, run the unit tests
#   make TARGET=aarch64  cross-build for arm64 (or CC=aarch64-linux-gnu-gcc)
#   make O=DIR        the program and the libraries built in DIR (objects too): another
#                     configuration beside the default one (make O=build-O0 CFLAGS=-O0)
#   make bench        mha against ONNX Runtime, PyTorch and the machine's GEMM rate
#                     (half an hour, unattended, on a quiet machine: bench/README.md);
#                     writes bench/results-DATE.md.  BENCH_ARGS=--quick: a smoke run
#                     of a few minutes into build/bench-quick.md
#   make bench-npz    reading a .npz of one 8 MiB deflated member, against d3423c1's build
#   make install      PREFIX=/usr/local DESTDIR= : program, libraries (libmha, libmhe), headers,
#                     mha.pc and mhe.pc, man page,
#                     the Python package (where there is a python3)
#   make uninstall    remove what install put there
#   make clean

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
# the Python package (python/mha) beside the system's python3's own, where
# there is one (Debian's dist-packages: on sys.path for PREFIX=/usr/local)
PYTHON_DIR ?= $(shell $(PYTHON) -c 'import sys; print("$(PREFIX)/lib/python%d.%d/dist-packages" % sys.version_info[:2])' 2>/dev/null)
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
          -Wformat=2 -Wpointer-arith -Wundef -Wcast-align -Wwrite-strings
# never -ffast-math or -Ofast: they change NaN/inf handling and golden numbers
STRICT  =
ALL_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(WARN) $(STRICT) $(CFLAGS)

# threads for the fast path: the library's own team (lib/kernels/team.c), POSIX
# threads, in glibc's libc (-pthread links nothing more there)
PTHREAD ?= -pthread
# the fast path's kernels, once per element type and vector width (x86: AVX2
# and AVX-512 beside the baseline, picked at run time); fused multiply-adds
# are allowed there, which -ffast-math is not
KERNEL_CFLAGS = -O3 -ffp-contract=fast
# The machine the build is for is the compiler's target, not this machine:
# make CC=aarch64-linux-gnu-gcc, or make TARGET=aarch64 (which names that
# compiler when CC is make's default), cross-builds for arm64.  x86-64:
# AVX2 and AVX-512 kernels beside the baseline; arm64: NEON kernels beside
# it; anything else: the baseline alone.
ifdef TARGET
ifeq ($(origin CC),default)
# aarch64 or a whole triplet (aarch64-linux-gnu)
CC = $(if $(findstring -,$(TARGET)),$(TARGET),$(TARGET)-linux-gnu)-gcc
endif
endif
MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq (,$(filter x86_64-% amd64-%,$(MACHINE)))
KERNEL_DEFS = -DMHA_X86_KERNELS
KERNEL_VARIANTS = f64_base f32_base f64_avx2 f32_avx2 f64_avx512 f32_avx512
else ifneq (,$(filter aarch64-% arm64-%,$(MACHINE)))
KERNEL_DEFS = -DMHA_ARM_KERNELS
KERNEL_VARIANTS = f64_base f32_base f64_neon f32_neon
else
KERNEL_DEFS =
KERNEL_VARIANTS = f64_base f32_base
endif
# a cross build finds the target's libraries (Debian's multiarch -dev
# packages, e.g. libcjson-dev:arm64) through their own pkg-config files
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
BUILD_MULTIARCH := $(shell cc -print-multiarch 2>/dev/null)
ifneq ($(MULTIARCH),$(BUILD_MULTIARCH))
ifneq (,$(MULTIARCH))
PKG_CONFIG ?= PKG_CONFIG_LIBDIR=/usr/lib/$(MULTIARCH)/pkgconfig:/usr/share/pkgconfig pkg-config
endif
endif

PYTHON  ?= /usr/bin/python3
PKG_CONFIG ?= pkg-config
CJSON_CFLAGS = $(shell $(PKG_CONFIG) --cflags libcjson 2>/dev/null)
CJSON_LIBS   = $(shell $(PKG_CONFIG) --libs libcjson 2>/dev/null || echo -lcjson)
# deflate: .npz members inflated by libdeflate (read/deflated.c; zlib says
# what is wrong with a stream libdeflate refuses), deflated by zlib
# (write/zip.c, --compress), CRC-32 by zlib
DEFLATE_CFLAGS = $(shell $(PKG_CONFIG) --cflags zlib libdeflate 2>/dev/null)
DEFLATE_LIBS   = $(shell $(PKG_CONFIG) --libs zlib libdeflate 2>/dev/null || echo -lz -ldeflate)
CHECK_CFLAGS = $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell $(PKG_CONFIG) --libs check 2>/dev/null || echo -lcheck)

VERSION  = $(shell sed -n 's/^\#define MHA_VERSION_STRING "\(.*\)"/\1/p' lib/mha.h)
SOVERSION = 6

# Debian packages the build and the tests need
DEB_PACKAGES = gcc make pkg-config libcjson-dev zlib1g-dev libdeflate-dev check python3 python3-numpy jq \
               libxml2-utils librsvg2-bin

# lib/ by role (lib/README.md): every .c of its folders but the kernels
# compiled once per element type and vector width (below)
LIB_DIRS = base kernels steps core latent api
LIB_VARIANT_SRC = lib/kernels/kernel.c lib/kernels/kernel_attend.c lib/kernels/kernel_bwd.c
LIB_SRC = $(filter-out $(LIB_VARIANT_SRC),$(sort $(foreach d,$(LIB_DIRS),$(wildcard lib/$(d)/*.c))))
# its includes name a header by folder ("kernels/kernel.h"), the public one by name
LIB_CPPFLAGS = -Ilib
LIB_HEADERS = $(wildcard lib/*.h lib/*/*.h)
# O=DIR: the normal build in DIR, objects and products (the program and the
# libraries), a configuration beside the default one (make O=build-O0
# CFLAGS='-O0 -g'); the default's objects are in build/, its products at
# ./mha, lib/ and engine/, where the tests run them
O ?=
BUILD = $(if $(O),$(O),build)
PROG = $(if $(O),$(O)/mha,mha)
LIBMHA_A = $(if $(O),$(O)/libmha.a,lib/libmha.a)
LIBMHA_SO = $(if $(O),$(O)/libmha.so,lib/libmha.so)
LIBMHE_A = $(if $(O),$(O)/libmhe.a,engine/libmhe.a)
LIBMHE_SO = $(if $(O),$(O)/libmhe.so,engine/libmhe.so)

# engine/ by role (engine/README.md): reading, resolving a layer, running
# the steps, comparing; libmhe, every .c of its folders
ENGINE_DIRS = util read load run compare api
ENGINE_SRC = $(sort $(foreach d,$(ENGINE_DIRS),$(wildcard engine/$(d)/*.c)))
ENGINE_VERSION = $(shell sed -n 's/^\#define MHE_VERSION_\(MAJOR\|MINOR\|RELEASE\) \([0-9]*\)/\2/p' engine/mhe.h | paste -sd.)
ENGINE_SOVERSION = 1
# cli/ by role (docs/architecture.md): the program, a front over the engine
CLI_DIRS = base write cmd
CLI_SRC = $(sort $(foreach d,$(CLI_DIRS),$(wildcard cli/$(d)/*.c)))
# their includes name a header by folder ("read/json.h", "write/emit.h"),
# the libraries' by name ("mha.h", "mhe.h"), the page's generated strings by
# name ("html_page.h")
CLI_CPPFLAGS = -Icli -Iengine -Ilib -Ibuild/gen
# the engine sees its own tree and the arithmetic's header, never cli/
ENGINE_CPPFLAGS = -Iengine -Ilib
# each object's headers, as the compiler found them (-MMD), so that a header
# touched rebuilds only what includes it; -MP: a header removed is no error
DEPFLAGS = -MMD -MP
# the products (kernel.c) and the fused attention (kernel_attend.c), per element type
# and vector width
LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERNEL_VARIANTS:%=$(BUILD)/lib/kernels/kernel_%.o) \
          $(KERNEL_VARIANTS:%=$(BUILD)/lib/kernels/kernel_attend_%.o)
# the backward's elementwise kernels (kernel_bwd.c), per element type and vector width
BWD_VARIANTS = $(KERNEL_VARIANTS)
LIB_OBJ += $(BWD_VARIANTS:%=$(BUILD)/lib/kernels/kernel_bwd_%.o)
# compiled again with -DMHA_F32 (lib/core/NAME.c into NAME_f32.o): mha_backward_f32's
# float arithmetic
F32_AGAIN = core/backward core/backward_plain core/backward_fast
LIB_OBJ += $(F32_AGAIN:%=$(BUILD)/lib/%_f32.o)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/%.o)
ENGINE_OBJ = $(ENGINE_SRC:%.c=$(BUILD)/%.o)
# the unit tests, one file per subject (tests/unit/main.c runs them)
UNIT_SRC = $(wildcard tests/unit/*.c)
TEST_OBJ = $(UNIT_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tests/ref.o $(BUILD)/engine/util/number.o

.PHONY: all demo check bench conformance deps install uninstall clean test-unit test-cli test-numpy test-engine test-lowp \
        test-formats test-npy test-npz test-checkpoint test-schema test-samples test-docs \
        test-install test-symbols check-browser test-backward test-compare bench-npz test-layers \
        test-signals test-abi arm64-deps check-arm64 check-clang FORCE

all: $(PROG) $(LIBMHA_A) $(LIBMHA_SO) $(LIBMHE_A) $(LIBMHE_SO)

# a kernel variant's flags from its name (f32_avx2: -DMHA_F32 -DVB=32 -mavx2
# -mfma), for kernel.c, kernel_attend.c and kernel_bwd.c
kernel_variant = -DSFX=$(1) $(if $(filter f32_%,$(1)),-DMHA_F32) \
	$(if $(filter %_base,$(1)),-DVB=16)$(if $(filter %_avx2,$(1)),-DVB=32 -mavx2 -mfma)$(if \
	$(filter %_avx512,$(1)),-DVB=64 -mavx512f -mfma)$(if $(filter %_neon,$(1)),-DVB=16 -DMR=8)
# fused multiply-adds as in kernel.c, but for s·scale, which kernel_bwd.c's
# scaled() rounds first
BWD_CFLAGS = $(KERNEL_CFLAGS)

# ---- the compile rules, written once --------------------------------------
#
# $(call compile_rules,DIR,COMPILER,LIB_FLAGS): every object of lib/, engine/,
# cli/ and tests/ into DIR, compiled by COMPILER (the compiler and its flags),
# lib/'s with LIB_FLAGS too; everything rebuilt when COMPILER changes (DIR's
# .flags: -Werror for check).  One configuration a folder: the normal build
# (build/, or O=DIR's), ASan's (build-asan/) and the fuzzers' (build/fuzz/obj/)
# are three calls (at the end of this file).  Kernel variants:
# kernel_f64_base.o ... kernel_f32_avx512.o, kernel_attend_*.o, kernel_bwd_*.o
# (kernel_attend_% and kernel_bwd_% have the shorter stems, so make picks
# their rules for theirs); lib/NAME_f32.o: NAME.c again with -DMHA_F32.
define compile_rules
$(1)/.flags: FORCE
	@mkdir -p $(1)
	@echo '$(2)' | cmp -s - $$@ || echo '$(2)' > $$@

$(1)/lib/%.o: lib/%.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(DEPFLAGS) $$(LIB_CPPFLAGS) $$(PTHREAD) $(3) -fvisibility=hidden -DMHA_BUILDING -c $$< -o $$@

$(1)/lib/%_f32.o: lib/%.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(DEPFLAGS) $$(LIB_CPPFLAGS) $$(PTHREAD) $(3) -fvisibility=hidden -DMHA_BUILDING -DMHA_F32 \
		-c $$< -o $$@

$(1)/lib/kernels/kernel_%.o: lib/kernels/kernel.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(KERNEL_CFLAGS) $$(DEPFLAGS) $$(LIB_CPPFLAGS) $$(PTHREAD) $(3) -fvisibility=hidden \
		-DMHA_BUILDING $$(call kernel_variant,$$*) -c $$< -o $$@

$(1)/lib/kernels/kernel_attend_%.o: lib/kernels/kernel_attend.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(KERNEL_CFLAGS) $$(DEPFLAGS) $$(LIB_CPPFLAGS) $$(PTHREAD) $(3) -fvisibility=hidden \
		-DMHA_BUILDING $$(call kernel_variant,$$*) -c $$< -o $$@

$(1)/lib/kernels/kernel_bwd_%.o: lib/kernels/kernel_bwd.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(BWD_CFLAGS) $$(DEPFLAGS) $$(LIB_CPPFLAGS) $(3) -fvisibility=hidden -DMHA_BUILDING \
		$$(call kernel_variant,$$*) -c $$< -o $$@

# the engine's objects: only mhe.h's names seen from outside libmhe.so
$(1)/engine/%.o: engine/%.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(DEPFLAGS) $$(ENGINE_CPPFLAGS) $$(CJSON_CFLAGS) $$(DEFLATE_CFLAGS) $(3) \
		-fvisibility=hidden -c $$< -o $$@

$(1)/cli/%.o: cli/%.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(DEPFLAGS) $$(CLI_CPPFLAGS) $$(CJSON_CFLAGS) $$(DEFLATE_CFLAGS) $(3) -c $$< -o $$@

$(1)/tests/%.o: tests/%.c $(1)/.flags
	@mkdir -p $$(@D)
	$(2) $$(DEPFLAGS) $$(CLI_CPPFLAGS) $$(CHECK_CFLAGS) $$(CJSON_CFLAGS) -c $$< -o $$@

$(1)/cli/write/html.o: build/gen/html_page.h
endef

# the interactive page's style, frame and script, carried as C strings (cli/write/html.c)
# (the script in two files, page.js then page_screen.js, one script in the page)
HTML_ASSETS = cli/write/html/page.css cli/write/html/page.html cli/write/html/page.js \
              cli/write/html/page_screen.js
build/gen/html_page.h: $(HTML_ASSETS) cli/write/html/embed.sh
	sh cli/write/html/embed.sh $@ $(HTML_ASSETS)

$(LIBMHA_A): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

# beside it the name programs linked to it look for (its soname), so that
# the engine and the tests run on the tree's own
$(LIBMHA_SO): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libmha.so.$(SOVERSION) $(LDFLAGS) $(PTHREAD) -o $@ $^ -lm
	ln -sf libmha.so $@.$(SOVERSION)

$(LIBMHE_A): $(ENGINE_OBJ)
	rm -f $@
	ar rcs $@ $^

# libmhe.so over libmha.so, as the program is over both
$(LIBMHE_SO): $(ENGINE_OBJ) $(LIBMHA_SO)
	$(CC) -shared -Wl,-soname,libmhe.so.$(ENGINE_SOVERSION) $(LDFLAGS) $(PTHREAD) -o $@ \
		$(ENGINE_OBJ) -L$(dir $(LIBMHA_SO)) -l:libmha.so $(CJSON_LIBS) $(DEFLATE_LIBS) -lm
	ln -sf libmhe.so $@.$(ENGINE_SOVERSION)

$(PROG): $(CLI_OBJ) $(LIBMHE_A) $(LIBMHA_A)
	$(CC) $(LDFLAGS) $(PTHREAD) -o $@ $(CLI_OBJ) $(LIBMHE_A) $(LIBMHA_A) $(CJSON_LIBS) \
		$(DEFLATE_LIBS) -lm

tests/conformance: $(BUILD)/tests/conformance.o lib/libmha.a
	$(CC) $(LDFLAGS) $(PTHREAD) -o $@ $(BUILD)/tests/conformance.o lib/libmha.a $(CJSON_LIBS) -lm

$(BUILD)/tests/conformance.o: tests/conformance.c $(BUILD)/.flags
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(DEPFLAGS) $(CJSON_CFLAGS) -c $< -o $@

# the unit tests count what libmha allocates (test_memory_measured): its
# allocation calls, and the tests' own, go through wrappers in tests/unit/memory.c
TEST_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=mha_big_alloc,--wrap=mha_big_free
# and pthread_create, which test_threads_refused makes fail
TEST_WRAP := $(TEST_WRAP),--wrap=pthread_create

# cli/write/zip.c's ZIP64 records, forced on a small archive (tests/npz_check.py)
tests/zip_test: $(BUILD)/tests/zip_test.o $(filter-out $(BUILD)/cli/cmd/main.o,$(CLI_OBJ)) engine/libmhe.a lib/libmha.a
	$(CC) $(LDFLAGS) $(PTHREAD) -o $@ $^ $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

# engine/read/npz.c alone, its inflating (zlib) too, against NumPy and Python's zlib
# (tests/npz_read_check.py)
tests/npz_test: $(BUILD)/tests/npz_test.o $(filter-out $(BUILD)/cli/cmd/main.o,$(CLI_OBJ)) engine/libmhe.a lib/libmha.a
	$(CC) $(LDFLAGS) $(PTHREAD) -o $@ $^ $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

# each attention command's --help against its option table (cli/cmd/attention.c)
tests/options_test: $(BUILD)/tests/options_test.o $(filter-out $(BUILD)/cli/cmd/main.o,$(CLI_OBJ)) engine/libmhe.a lib/libmha.a
	$(CC) $(LDFLAGS) $(PTHREAD) -o $@ $^ $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

tests/test_lib: $(TEST_OBJ) lib/libmha.a
	$(CC) $(LDFLAGS) $(PTHREAD) $(TEST_WRAP) -o $@ $(TEST_OBJ) lib/libmha.a $(CHECK_LIBS) -lm

deps:
	@sh tests/ensure_debs.sh $(DEB_PACKAGES)

demo: deps
	$(MAKE) all
	./mha forward -x samples/full-wo/x.json -w samples/full-wo/weights.json \
		--heads 2 --causal --print all

# the builds of check and check-asan use every core (the suites are timed in CI)
NPROC := $(shell nproc 2>/dev/null || echo 1)

check: deps
	$(MAKE) -j$(NPROC) STRICT=-Werror all tests/test_lib
	$(MAKE) STRICT=-Werror test-unit test-cli test-numpy test-formats test-npy test-npz \
		test-checkpoint test-schema test-samples test-docs test-install test-symbols test-backward \
		test-compare test-layers test-options test-python test-signals test-abi test-engine \
		test-lowp
	@echo "make check: all tests passed"

# mha against ONNX Runtime, PyTorch and the machine's GEMM rate: not part of check
# (bench/README.md).  ONNX Runtime comes from npm into bench/ort/ (gitignored).
BENCH_PACKAGES = python3-torch python3-numpy libopenblas0-pthread python3-onnx nodejs
ORT_VERSION = 1.30.0
BENCH_ORT   = bench/ort/node_modules
BENCH_OUT  := $(if $(findstring --quick,$(BENCH_ARGS)),build/bench-quick.md,bench/results-$(shell date -u +%F).md)

# --ignore-scripts: the package's install script would fetch GPU parts
$(BENCH_ORT)/onnxruntime-node/package.json:
	npm install --prefix bench/ort --ignore-scripts --no-audit --no-fund \
		onnxruntime-node@$(ORT_VERSION)

bench/bench_mha: bench/bench_mha.c lib/libmha.a lib/mha.h
	$(CC) $(ALL_CFLAGS) $(PTHREAD) -o $@ bench/bench_mha.c lib/libmha.a -lm

bench: deps
	@sh tests/ensure_debs.sh --optional $(BENCH_PACKAGES)
	$(MAKE) bench/bench_mha
	-$(MAKE) $(BENCH_ORT)/onnxruntime-node/package.json
	@mkdir -p build
	$(PYTHON) bench/bench.py --ort $(BENCH_ORT) --output $(BENCH_OUT) $(BENCH_ARGS) bench/bench_mha
	$(MAKE) mha && $(PYTHON) bench/bench_process.py --append $(BENCH_OUT) $(BENCH_PROCESS_ARGS) \
		bench/bench_mha ./mha
	$(PYTHON) bench/bench_process.py --avx2 --append $(BENCH_OUT) $(BENCH_PROCESS_ARGS) \
		bench/bench_mha ./mha
	$(PYTHON) bench/bench_replace.py --append $(BENCH_OUT)
	$(MAKE) bench/bench_backward && $(PYTHON) bench/bench_backward.py --append $(BENCH_OUT) \
		bench/bench_backward
	$(PYTHON) bench/bench_backward.py --avx2 --append $(BENCH_OUT) $(filter --quick,$(BENCH_ARGS)) \
		bench/bench_backward
	$(MAKE) bench/bench_mla && $(PYTHON) bench/bench_mla.py --append $(BENCH_OUT) \
		$(filter --quick,$(BENCH_ARGS)) bench/bench_mla
	$(MAKE) bench-npz BENCH_NPZ_ARGS="--append $(BENCH_OUT)"
	$(PYTHON) bench/bench_progress.py --append $(BENCH_OUT) $(filter --quick,$(BENCH_ARGS)) ./mha
	$(PYTHON) bench/bench_python.py --append $(BENCH_OUT) $(filter --quick,$(BENCH_ARGS)) ./mha
	$(PYTHON) bench/bench_python_call.py --append $(BENCH_OUT) $(filter --quick,$(BENCH_ARGS)) \
		bench/bench_mha ./mha

# reading a .npz of one 8 MiB deflated member, this build against $(BENCH_NPZ_BASE)'s
# (the last with its own inflate), built from git in build/bench-npz-base/: a few
# minutes, the first time most of it that build (bench/README.md)
BENCH_NPZ_BASE = d3423c1
# (its includes by bare name, so that one source builds against both layouts)
bench/bench_npz: bench/bench_npz.c $(filter-out $(BUILD)/cli/cmd/main.o,$(CLI_OBJ)) engine/libmhe.a lib/libmha.a
	$(CC) $(ALL_CFLAGS) $(CJSON_CFLAGS) $(DEFLATE_CFLAGS) -Iengine/util -Iengine/read $(CLI_CPPFLAGS) \
		-o $@ $^ $(CJSON_LIBS) $(DEFLATE_LIBS) $(PTHREAD) -lm

bench-npz: mha bench/bench_npz
	$(PYTHON) bench/bench_npz.py --base $(BENCH_NPZ_BASE) $(BENCH_NPZ_ARGS) ./mha bench/bench_npz

bench/bench_backward: bench/bench_backward.c lib/libmha.a lib/mha.h
	$(CC) $(ALL_CFLAGS) $(PTHREAD) -o $@ bench/bench_backward.c lib/libmha.a -lm

bench/bench_mla: bench/bench_mla.c lib/libmha.a lib/mha.h
	$(CC) $(ALL_CFLAGS) $(PTHREAD) -o $@ bench/bench_mla.c lib/libmha.a -lm

# the ONNX Attention operator's backend cases, read where they are (never copied)
CONFORMANCE_DIR ?= ../shared/conformance/onnx-attention-opset25
# ONNX RotaryEmbedding (--rope): through mha_rope_apply, mha_forward's q_rot and the CLI
ROPE_CONFORMANCE_DIR ?= ../shared/conformance/onnx-rotary-embedding

conformance: deps
	$(MAKE) STRICT=-Werror mha tests/conformance
	./tests/conformance --mha ./mha $(CONFORMANCE_DIR)
	./tests/conformance --mha ./mha $(ROPE_CONFORMANCE_DIR)

test-unit: tests/test_lib
	CK_FORK=yes ./tests/test_lib

# SIGTERM and SIGINT stop a run of many tokens within a second (issue 37)
test-signals: mha
	$(PYTHON) tests/signal_check.py ./mha
	$(PYTHON) tests/progress_check.py ./mha

test-options: tests/options_test
	./tests/options_test

test-cli: mha
	sh tests/cli/run.sh

test-numpy: mha
	$(PYTHON) tests/numpy_check.py ./mha

test-formats: mha
	$(PYTHON) tests/formats_check.py ./mha

test-npy: mha
	$(PYTHON) tests/npy_check.py ./mha

# -o run.npz against the JSON output, and against np.save's bytes
test-npz: mha tests/zip_test tests/npz_test
	$(PYTHON) tests/npz_check.py ./mha tests/zip_test
	$(PYTHON) tests/npz_read_check.py ./mha tests/npz_test tests/zip_test

# safetensors checkpoints, config.json and the model families against NumPy
test-checkpoint: mha
	$(PYTHON) tests/checkpoint_check.py ./mha
	$(PYTHON) tests/families_check.py ./mha

# the JSON output's schema as docs/formats.md's tables give it, over every kind of run
test-schema: mha
	$(PYTHON) tests/schema_check.py ./mha docs/formats.md

test-samples: mha
	sh samples/run.sh

# mha compare against deliberately wrong NumPy attentions (and torch's, where it imports),
# forward and backward, and against names, heads, rows and rounding as people give them
test-compare: mha
	$(PYTHON) tests/compare_check.py ./mha
	$(PYTHON) tests/compare_grad_check.py ./mha

# cli/'s includes run down its folders' ladder, with no circle (docs/architecture.md);
# --self-test plants a back-reference, a circle and a stray file in a copy
test-layers:
	$(PYTHON) tests/layers.py
	$(PYTHON) tests/layers.py --self-test

# every example of the documentation: README.md, the pages of docs/ and the man page
DOC_FILES = README.md $(sort $(wildcard docs/*.md)) man/mha.1

test-docs: mha
	sh tests/doc_examples.sh $(DOC_FILES)

test-install: all
	PYTHON=$(PYTHON) sh tests/install_test.sh

# the Python package (python/, docs/python.md): its pytest suite against the
# built ./mha, then pip install ./python into a fresh venv, offline
PYTHON_PACKAGES = python3-pytest python3-venv python3-pip
test-python: mha
	@sh tests/ensure_debs.sh $(PYTHON_PACKAGES)
	@sh tests/ensure_debs.sh --optional python3-torch
	MHA_EXECUTABLE=$(CURDIR)/mha PYTHONPATH=$(CURDIR)/python PYTHONDONTWRITEBYTECODE=1 \
		$(PYTHON) -m pytest -q -p no:cacheprovider \
		python/tests
	PYTHON=$(PYTHON) sh tests/python_install_test.sh

# the libraries export mha_ names only (the static one too: no team_run)
# a program built against this header against a library whose structs grew
# (tests/abi_check.sh: the library built again in a scratch tree)
test-abi: lib/libmha.a
	CC="$(CC)" sh tests/abi_check.sh

# a program over the engine alone (engine/mhe.h; no object of cli/): a
# checkpoint's layer, a step, a comparison, the messages (tests/engine_check.sh);
# then the same client on the shared libraries (an RPATH, which libmhe.so's own
# need of libmha.so follows too)
tests/engine_client: tests/engine_client.c engine/mhe.h engine/libmhe.a lib/libmha.a
	$(CC) $(ALL_CFLAGS) -Iengine -o $@ tests/engine_client.c engine/libmhe.a lib/libmha.a \
		$(PTHREAD) $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

tests/engine_client_so: tests/engine_client.c engine/mhe.h engine/libmhe.so lib/libmha.so
	$(CC) $(ALL_CFLAGS) -Iengine -o $@ tests/engine_client.c -Lengine -l:libmhe.so \
		-Wl,--disable-new-dtags,-rpath,'$$ORIGIN/../engine:$$ORIGIN/../lib' -Wl,-rpath-link,lib

test-engine: mha tests/engine_client tests/engine_client_so
	PYTHON=$(PYTHON) sh tests/engine_check.sh ./mha tests/engine_client
	PYTHON=$(PYTHON) sh tests/engine_check.sh ./mha tests/engine_client_so

test-symbols: lib/libmha.a lib/libmha.so
	sh tests/symbols_test.sh lib/libmha.a lib/libmha.so

# -o attn.html in headless Chromium (tests/html_check.py; a screenshot in
# build/html-page.png, docs/html-page.png's recipe; the overview, --pool,
# in tests/html_pool_check.py, its screenshot build/html-pool.png): too heavy a
# package for make check, so a target of its own that .ci/run runs
BROWSER_PACKAGES = chromium
check-browser: deps
	@sh tests/ensure_debs.sh $(BROWSER_PACKAGES)
	$(MAKE) STRICT=-Werror mha
	$(PYTHON) tests/html_check.py ./mha --screenshot build/html-page.png
	$(PYTHON) tests/html_pool_check.py ./mha --screenshot build/html-pool.png

# mha backward: the library's backward case (reference, finite differences),
# then the CLI against torch.autograd in float64 (skipped, and said, without torch);
# multi-head latent attention, forward and backward, against references from
# DeepSeek-V3's modeling code (tests/mla_check.py)
test-backward: mha tests/test_lib
	CK_RUN_CASE=backward CK_FORK=yes ./tests/test_lib
	@sh tests/ensure_debs.sh --optional python3-torch
	$(PYTHON) tests/backward_check.py ./mha
	$(PYTHON) tests/mla_check.py ./mha

# the low-precision reference (mha forward --dtype bf16, fp16) against
# PyTorch's eager attention in those types (tests/lowp_check.py), and
# compare judging bfloat16 and float16 ports by it (lowp_compare_check.py)
test-lowp: mha $(LIBMHE_SO)
	@sh tests/ensure_debs.sh --optional python3-torch
	$(PYTHON) tests/lowp_check.py ./mha
	MHA_EXECUTABLE=$(CURDIR)/mha $(PYTHON) tests/lowp_compare_check.py ./mha

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 mha $(DESTDIR)$(BINDIR)/mha
	install -m 644 lib/libmha.a $(DESTDIR)$(LIBDIR)/libmha.a
	install -m 755 lib/libmha.so $(DESTDIR)$(LIBDIR)/libmha.so.$(VERSION)
	ln -sf libmha.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmha.so.$(SOVERSION)
	ln -sf libmha.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libmha.so
	install -m 644 lib/mha.h $(DESTDIR)$(INCLUDEDIR)/mha.h
	install -m 644 engine/libmhe.a $(DESTDIR)$(LIBDIR)/libmhe.a
	install -m 755 engine/libmhe.so $(DESTDIR)$(LIBDIR)/libmhe.so.$(ENGINE_VERSION)
	ln -sf libmhe.so.$(ENGINE_VERSION) $(DESTDIR)$(LIBDIR)/libmhe.so.$(ENGINE_SOVERSION)
	ln -sf libmhe.so.$(ENGINE_SOVERSION) $(DESTDIR)$(LIBDIR)/libmhe.so
	install -m 644 engine/mhe.h $(DESTDIR)$(INCLUDEDIR)/mhe.h
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
		'Name: mhe' 'Description: the mha engine: reading, resolving, comparing attention' \
		'Version: $(ENGINE_VERSION)' 'Requires.private: mha libcjson zlib libdeflate' \
		'Libs: -L$${libdir} -lmhe' 'Libs.private: -lm $(PTHREAD)' 'Cflags: -I$${includedir}' \
		> $(DESTDIR)$(PKGCONFIGDIR)/mhe.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/mhe.pc
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
		'Name: mha' 'Description: multi-head attention, exactly' 'Version: $(VERSION)' \
		'Libs: -L$${libdir} -lmha' 'Libs.private: -lm $(PTHREAD)' 'Cflags: -I$${includedir}' \
		> $(DESTDIR)$(PKGCONFIGDIR)/mha.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/mha.pc
	install -m 644 man/mha.1 $(DESTDIR)$(MANDIR)/man1/mha.1
	@if [ -n "$(PYTHON_DIR)" ]; then \
		install -d $(DESTDIR)$(PYTHON_DIR)/mha && \
		install -m 644 python/mha/__init__.py python/mha/_lib.py python/mha/_result.py python/mha/_run.py \
			python/mha/testing.py $(DESTDIR)$(PYTHON_DIR)/mha/ && \
		printf '%s\n' '"""_where.py: written by make install."""' "VERSION = '$(VERSION)'" \
			"EXECUTABLE = '$(BINDIR)/mha'" "LIBRARY = '$(LIBDIR)/libmhe.so.$(ENGINE_SOVERSION)'" \
			> $(DESTDIR)$(PYTHON_DIR)/mha/_where.py && \
		chmod 644 $(DESTDIR)$(PYTHON_DIR)/mha/_where.py && \
		echo "the Python package: $(PYTHON_DIR)/mha"; \
	fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/mha $(DESTDIR)$(LIBDIR)/libmha.a \
		$(DESTDIR)$(LIBDIR)/libmha.so $(DESTDIR)$(LIBDIR)/libmha.so.$(SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libmha.so.$(VERSION) $(DESTDIR)$(INCLUDEDIR)/mha.h \
		$(DESTDIR)$(PKGCONFIGDIR)/mha.pc $(DESTDIR)$(MANDIR)/man1/mha.1 \
		$(DESTDIR)$(LIBDIR)/libmhe.a $(DESTDIR)$(LIBDIR)/libmhe.so \
		$(DESTDIR)$(LIBDIR)/libmhe.so.$(ENGINE_SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libmhe.so.$(ENGINE_VERSION) $(DESTDIR)$(INCLUDEDIR)/mhe.h \
		$(DESTDIR)$(PKGCONFIGDIR)/mhe.pc
	if [ -n "$(PYTHON_DIR)" ]; then rm -rf $(DESTDIR)$(PYTHON_DIR)/mha; fi

clean:
	rm -rf build $(ARM64_DIR) $(CLANG_DIR) mha lib/libmha.a lib/libmha.so lib/libmha.so.$(SOVERSION) engine/libmhe.a engine/libmhe.so engine/libmhe.so.$(ENGINE_SOVERSION) tests/engine_client tests/engine_client_so tests/test_lib tests/conformance tests/zip_test tests/npz_test \
		tests/options_test bench/bench_mha bench/bench_backward bench/bench_mla bench/bench_npz

# ---- fuzzing: libFuzzer targets in tests/fuzz/ (see tests/fuzz/README.md) ----
#
#   make fuzz SECONDS=N   build the targets with clang, ASan and UBSan, run each
#                         for N seconds (default 10) on a copy of its corpus
#   make fuzz-regress     run each target once over its corpus and regressions
#
# Built apart from everything else, in build/fuzz/: cli/ (but main.c) and
# lib/ with only the baseline kernels, instrumented.

FUZZ_CC       ?= $(shell command -v clang-14 2>/dev/null || echo clang)
FUZZ_PACKAGES  = clang libclang-rt-14-dev
FUZZ_TARGETS   = json csv npy safetensors weights format args problem npz model
FUZZ_SAN       = -fsanitize=address,undefined -fno-sanitize-recover=undefined
# clang warns where gcc, the real build's compiler, does not: a va_list
# format (msg.c) and casts to the kernels' aligned vectors (kernel.c)
FUZZ_WARN      = $(WARN) -Wno-unknown-pragmas -Wno-format-nonliteral -Wno-cast-align
FUZZ_CFLAGS    = -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(FUZZ_WARN) \
                 -g -O1 $(FUZZ_SAN) $(CJSON_CFLAGS) $(DEFLATE_CFLAGS)
FUZZ_SRC       = $(filter-out cli/cmd/main.c,$(CLI_SRC)) $(ENGINE_SRC) $(LIB_SRC)
FUZZ_OBJ       = $(FUZZ_SRC:%.c=build/fuzz/obj/%.o) build/fuzz/obj/lib/kernels/kernel_f64_base.o \
                 build/fuzz/obj/lib/kernels/kernel_attend_f64_base.o \
                 build/fuzz/obj/lib/kernels/kernel_attend_f32_base.o \
                 build/fuzz/obj/lib/kernels/kernel_bwd_f64_base.o \
                 build/fuzz/obj/lib/kernels/kernel_f32_base.o \
                 build/fuzz/obj/lib/kernels/kernel_bwd_f32_base.o \
                 $(F32_AGAIN:%=build/fuzz/obj/lib/%_f32.o)
FUZZ_BIN       = $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
SECONDS       ?= 10

.PHONY: fuzz fuzz-regress fuzz-build fuzz-deps

fuzz-deps:
	@sh tests/ensure_debs.sh $(FUZZ_PACKAGES)

build/fuzz/libmha-fuzz.a: $(FUZZ_OBJ)
	rm -f $@
	ar rcs $@ $^

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/*.h $(wildcard cli/*/*.h engine/*/*.h) build/fuzz/libmha-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CLI_CPPFLAGS) -fsanitize=fuzzer -o $@ $< build/fuzz/libmha-fuzz.a \
		$(CJSON_LIBS) $(DEFLATE_LIBS) -lm

fuzz-build: deps fuzz-deps
	$(MAKE) $(FUZZ_BIN)

fuzz: fuzz-build
	sh tests/fuzz/run.sh fuzz $(SECONDS) $(FUZZ_TARGETS)

fuzz-regress: fuzz-build
	sh tests/fuzz/run.sh regress 0 $(FUZZ_TARGETS)

# ---- memory checking: make check-asan, make check-valgrind (TESTING.md) ----
#
#   make check-asan       everything (library, CLI, unit tests, conformance
#                         runner) rebuilt with AddressSanitizer and UBSan into
#                         build-asan/, never touching build/, ./mha or lib/;
#                         then every suite run against those binaries
#   make check-valgrind   valgrind memcheck over the normal build: unit tests,
#                         CLI cases, samples, conformance (tests/valgrind.sh)

ASAN_DIR   = build-asan
ASAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# after ALL_CFLAGS, so -O1 wins over CFLAGS' -O2; the kernels still get
# KERNEL_CFLAGS' -O3 -ffp-contract=fast after it, so they are the same code
# (and the same numbers) as in the normal build, now checked
ASAN_ALL_CFLAGS = $(ALL_CFLAGS) $(ASAN_FLAGS) -g -O1
ASAN_ENV   = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_LIB_OBJ  = $(LIB_SRC:%.c=$(ASAN_DIR)/%.o) $(KERNEL_VARIANTS:%=$(ASAN_DIR)/lib/kernels/kernel_%.o) \
                $(KERNEL_VARIANTS:%=$(ASAN_DIR)/lib/kernels/kernel_attend_%.o) \
                $(BWD_VARIANTS:%=$(ASAN_DIR)/lib/kernels/kernel_bwd_%.o) \
                $(F32_AGAIN:%=$(ASAN_DIR)/lib/%_f32.o)
ASAN_CLI_OBJ  = $(CLI_SRC:%.c=$(ASAN_DIR)/%.o)
ASAN_ENGINE_OBJ = $(ENGINE_SRC:%.c=$(ASAN_DIR)/%.o)
ASAN_TEST_OBJ = $(TEST_OBJ:$(BUILD)/%=$(ASAN_DIR)/%)
ASAN_BINS  = $(ASAN_DIR)/mha $(ASAN_DIR)/libmha.a $(ASAN_DIR)/libmhe.a $(ASAN_DIR)/test_lib \
             $(ASAN_DIR)/conformance $(ASAN_DIR)/engine_client
VALGRIND_PACKAGES = valgrind

.PHONY: asan check-asan check-valgrind clean-asan

asan: $(ASAN_BINS)

clean: clean-asan
clean-asan:
	rm -rf $(ASAN_DIR)

$(ASAN_DIR)/libmha.a: $(ASAN_LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(ASAN_DIR)/libmhe.a: $(ASAN_ENGINE_OBJ)
	rm -f $@
	ar rcs $@ $^

$(ASAN_DIR)/mha: $(ASAN_CLI_OBJ) $(ASAN_DIR)/libmhe.a $(ASAN_DIR)/libmha.a
	$(CC) $(ASAN_FLAGS) $(LDFLAGS) $(PTHREAD) -o $@ $(ASAN_CLI_OBJ) $(ASAN_DIR)/libmhe.a \
		$(ASAN_DIR)/libmha.a $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

$(ASAN_DIR)/engine_client: tests/engine_client.c engine/mhe.h $(ASAN_DIR)/libmhe.a $(ASAN_DIR)/libmha.a
	$(CC) $(ASAN_ALL_CFLAGS) $(LDFLAGS) -Iengine -o $@ tests/engine_client.c $(ASAN_DIR)/libmhe.a \
		$(ASAN_DIR)/libmha.a $(PTHREAD) $(CJSON_LIBS) $(DEFLATE_LIBS) -lm

$(ASAN_DIR)/test_lib: $(ASAN_TEST_OBJ) $(ASAN_DIR)/libmha.a
	$(CC) $(ASAN_FLAGS) $(LDFLAGS) $(PTHREAD) $(TEST_WRAP) -o $@ $(ASAN_TEST_OBJ) $(ASAN_DIR)/libmha.a $(CHECK_LIBS) -lm

$(ASAN_DIR)/conformance: $(ASAN_DIR)/tests/conformance.o $(ASAN_DIR)/libmha.a
	$(CC) $(ASAN_FLAGS) $(LDFLAGS) $(PTHREAD) -o $@ $< $(ASAN_DIR)/libmha.a $(CJSON_LIBS) -lm

# the unit tests once per kernel (base, AVX2, AVX-512 where the CPU has them),
# then every suite make check runs except test-install (packaging, no new code)
ASAN_KERNELS = $(patsubst f64_%,%,$(filter f64_%,$(KERNEL_VARIANTS)))

# arm64: the tree cross-built with Debian's aarch64 toolchain in
# build-arm64/tree (a copy of the sources, so this tree's own build stays),
# then its unit tests, the two-head sample on two threads, the signal test
# and the CLI's golden cases under qemu-user (tests/arm64_check.sh; about
# five minutes on two cores).  Installs what it needs, arm64's multiarch
# -dev packages among them.
ARM64_DIR = build-arm64
# the sources a copied tree builds the program and the unit tests from:
# $(call copy_tree,DIR)
TREE_FILES = Makefile cli engine lib tests/unit tests/ref.c tests/ref.h
copy_tree = rm -rf $(1) && mkdir -p $(1) && tar -cf - $(TREE_FILES) | tar -C $(1) -xf -
ARM64_PACKAGES = gcc-aarch64-linux-gnu qemu-user libc6:arm64 libcjson-dev:arm64 zlib1g-dev:arm64 \
                 libdeflate-dev:arm64 check:arm64
arm64-deps: deps
	@dpkg --print-foreign-architectures 2>/dev/null | grep -qx arm64 || \
		{ dpkg --add-architecture arm64 && apt-get update -qq; }
	@sh tests/ensure_debs.sh $(ARM64_PACKAGES)

check-arm64: arm64-deps
	$(call copy_tree,$(ARM64_DIR)/tree)
	$(MAKE) -C $(ARM64_DIR)/tree -j$(NPROC) TARGET=aarch64 STRICT=-Werror mha tests/test_lib
	PYTHON=$(PYTHON) sh tests/arm64_check.sh $(ARM64_DIR)

# clang: the tree built with clang in build-clang/tree and its unit tests
# run with every kernel; then built with clang for arm64 in
# build-clang/arm64 (clang --target=aarch64-linux-gnu, Debian's aarch64
# toolchain and :arm64 libraries) and its unit tests run under qemu-user
# with the NEON kernels (CLANG_STRICT: -Werror but for two warnings GCC
# gives only on strict-alignment targets or not at all)
CLANG_DIR = build-clang
CLANG_STRICT = -Werror -Wno-missing-field-initializers -Wno-cast-align
check-clang: arm64-deps
	@sh tests/ensure_debs.sh clang
	$(call copy_tree,$(CLANG_DIR)/tree)
	$(call copy_tree,$(CLANG_DIR)/arm64)
	$(MAKE) -C $(CLANG_DIR)/tree -j$(NPROC) CC=clang STRICT="$(CLANG_STRICT)" mha tests/test_lib
	@for k in base avx2 avx512; do echo "unit tests built with clang, MHA_KERNEL=$$k"; \
		MHA_KERNEL=$$k CK_FORK=yes ./$(CLANG_DIR)/tree/tests/test_lib || exit 1; done
	$(MAKE) -C $(CLANG_DIR)/arm64 -j$(NPROC) CC="clang --target=aarch64-linux-gnu" \
		STRICT="$(CLANG_STRICT)" mha tests/test_lib
	@echo "unit tests built with clang for arm64, under qemu-aarch64 (the widest kernels: NEON)"
	QEMU_LD_PREFIX=/ CK_FORK=yes CK_TIMEOUT_MULTIPLIER=20 qemu-aarch64 $(CLANG_DIR)/arm64/tests/test_lib

# the unit tests of each kernel side by side (each mostly one thread, several
# minutes under ASan), their output shown in turn after
check-asan: deps
	$(MAKE) -j$(NPROC) asan
	@for k in $(ASAN_KERNELS); do \
		( $(ASAN_ENV) MHA_KERNEL=$$k CK_FORK=yes CK_TIMEOUT_MULTIPLIER=10 ./$(ASAN_DIR)/test_lib \
			> $(ASAN_DIR)/unit-$$k.log 2>&1; echo $$? > $(ASAN_DIR)/unit-$$k.rc ) & \
	done; wait; rc=0; \
	for k in $(ASAN_KERNELS); do \
		echo "unit tests under ASan, MHA_KERNEL=$$k"; cat $(ASAN_DIR)/unit-$$k.log; \
		[ "$$(cat $(ASAN_DIR)/unit-$$k.rc)" = 0 ] || rc=1; \
	done; exit $$rc
	$(ASAN_ENV) MHA=$(ASAN_DIR)/mha sh tests/cli/run.sh
	$(ASAN_ENV) $(PYTHON) tests/numpy_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/formats_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/npy_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/npz_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/checkpoint_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/families_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/backward_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/mla_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/progress_check.py $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/schema_check.py $(ASAN_DIR)/mha docs/formats.md
	$(ASAN_ENV) MHA=$(ASAN_DIR)/mha sh samples/run.sh
	$(ASAN_ENV) $(PYTHON) tests/compare_check.py --small $(ASAN_DIR)/mha
	$(ASAN_ENV) $(PYTHON) tests/compare_grad_check.py --small $(ASAN_DIR)/mha
	$(ASAN_ENV) PYTHON=$(PYTHON) sh tests/engine_check.sh $(ASAN_DIR)/mha $(ASAN_DIR)/engine_client
	$(ASAN_ENV) MHA=$(ASAN_DIR)/mha MHA_LIB=$(ASAN_DIR)/libmha.a MHE_LIB=$(ASAN_DIR)/libmhe.a \
		CC='$(CC) $(ASAN_FLAGS)' sh tests/doc_examples.sh $(DOC_FILES)
	@if [ -d $(CONFORMANCE_DIR) ]; then \
		echo "$(ASAN_ENV) ./$(ASAN_DIR)/conformance --mha ./$(ASAN_DIR)/mha $(CONFORMANCE_DIR)"; \
		$(ASAN_ENV) ./$(ASAN_DIR)/conformance --mha ./$(ASAN_DIR)/mha $(CONFORMANCE_DIR) || exit 1; \
	else \
		echo "$(CONFORMANCE_DIR) not found: conformance skipped"; \
	fi
	$(ASAN_ENV) ./$(ASAN_DIR)/conformance --mha ./$(ASAN_DIR)/mha $(ROPE_CONFORMANCE_DIR)
	@echo "make check-asan: all tests passed under AddressSanitizer and UBSan"

# valgrind over the normal build (-O2 -g, as installed): uninitialised
# reads that ASan cannot see; slower, so not in CI (about 6 minutes)
check-valgrind: deps
	@sh tests/ensure_debs.sh $(VALGRIND_PACKAGES)
	$(MAKE) STRICT=-Werror all tests/test_lib tests/conformance
	CONFORMANCE_DIR=$(CONFORMANCE_DIR) PYTHON=$(PYTHON) sh tests/valgrind.sh

# the three configurations' rules (compile_rules above): the normal build's
# objects position independent (the shared libraries); the fuzzers' with
# coverage for the fuzzer (its main() only in the targets)
$(eval $(call compile_rules,$(BUILD),$(CC) $(ALL_CFLAGS),$(KERNEL_DEFS) -fPIC))
$(eval $(call compile_rules,$(ASAN_DIR),$(CC) $(ASAN_ALL_CFLAGS),$(KERNEL_DEFS)))
$(eval $(call compile_rules,build/fuzz/obj,$(FUZZ_CC) $(FUZZ_CFLAGS),-fsanitize=fuzzer-no-link))

# the dependency files -MMD -MP wrote (DEPFLAGS: lib/, cli/ and tests/
# objects); the empty rule keeps make from trying to remake them (as
# kernel_%.o from a .d.o)
DEP_FILES := $(wildcard $(BUILD)/lib/*/*.d $(BUILD)/cli/*/*.d $(BUILD)/engine/*/*.d $(BUILD)/tests/*.d \
	$(BUILD)/tests/*/*.d $(ASAN_DIR)/lib/*/*.d $(ASAN_DIR)/cli/*/*.d $(ASAN_DIR)/engine/*/*.d \
	$(ASAN_DIR)/tests/*.d $(ASAN_DIR)/tests/*/*.d build/fuzz/obj/cli/*/*.d build/fuzz/obj/engine/*/*.d)
$(DEP_FILES): ;
-include $(DEP_FILES)
