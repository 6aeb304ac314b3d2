# mha: multi-head attention, exactly.  See README.md.
#
#   make              build ./mha, lib/libmha.a and lib/libmha.so
#   make demo         install what is missing (Debian, as root), build, run a sample
#   make check        install what is missing, build with -Werror, run every test
#   make conformance  the ONNX Attention cases (../shared/conformance/onnx-attention)
#   make bench        mha against PyTorch and the machine's GEMM rate (minutes)
#   make install      PREFIX=/usr/local DESTDIR= : program, libraries, header, mha.pc, man page
#   make uninstall    remove what install put there
#   make clean

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
          -Wformat=2 -Wpointer-arith -Wundef -Wcast-align -Wwrite-strings
# never -ffast-math or -Ofast: they change NaN/inf handling and golden numbers
STRICT  =
ALL_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(WARN) $(STRICT) $(CFLAGS)

# threads for the fast path; 'make OPENMP=' builds without them
OPENMP  ?= -fopenmp
ifeq ($(strip $(OPENMP)),)
WARN += -Wno-unknown-pragmas
endif
# the fast path's kernels, once per element type and vector width (x86: AVX2
# and AVX-512 beside the baseline, picked at run time); fused multiply-adds
# are allowed there, which -ffast-math is not
KERNEL_CFLAGS = -O3 -ffp-contract=fast
ARCH := $(shell uname -m)
ifneq (,$(filter x86_64 amd64,$(ARCH)))
X86_KERNELS = -DMHA_X86_KERNELS
KERNEL_VARIANTS = f64_base f32_base f64_avx2 f32_avx2 f64_avx512 f32_avx512
else
X86_KERNELS =
KERNEL_VARIANTS = f64_base f32_base
endif

PYTHON  ?= /usr/bin/python3
PKG_CONFIG ?= pkg-config
CJSON_CFLAGS = $(shell $(PKG_CONFIG) --cflags libcjson 2>/dev/null)
CJSON_LIBS   = $(shell $(PKG_CONFIG) --libs libcjson 2>/dev/null || echo -lcjson)
CHECK_CFLAGS = $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell $(PKG_CONFIG) --libs check 2>/dev/null || echo -lcheck)

VERSION  = $(shell sed -n 's/^\#define MHA_VERSION_STRING "\(.*\)"/\1/p' lib/mha.h)
SOVERSION = 0

# Debian packages the build and the tests need
DEB_PACKAGES = gcc make pkg-config libcjson-dev check python3 python3-numpy jq \
               libxml2-utils librsvg2-bin

LIB_SRC = lib/mha.c lib/fast.c
CLI_SRC = cli/main.c cli/msg.c cli/opts.c cli/matrix.c cli/input.c cli/read_json.c cli/read_csv.c \
          cli/read_npy.c cli/weights.c cli/write.c cli/shortest.c cli/write_npy.c cli/outfile.c \
          cli/cmd_forward.c cli/cmd_init.c cli/heatmap.c cli/svg.c cli/explain.c
LIB_OBJ = $(LIB_SRC:%.c=build/%.o) $(KERNEL_VARIANTS:%=build/lib/kernel_%.o)
CLI_OBJ = $(CLI_SRC:%.c=build/%.o)
TEST_OBJ = build/tests/test_lib.o build/tests/ref.o build/cli/shortest.o

.PHONY: all demo check bench conformance deps install uninstall clean test-unit test-cli test-numpy \
        test-formats test-npy test-samples test-docs test-install FORCE

all: mha lib/libmha.a lib/libmha.so

# rebuild everything when the flags change (e.g. -Werror for check)
build/.flags: FORCE
	@mkdir -p build
	@echo '$(CC) $(ALL_CFLAGS)' | cmp -s - $@ || echo '$(CC) $(ALL_CFLAGS)' > $@

build/lib/%.o: lib/%.c lib/mha.h lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(OPENMP) $(X86_KERNELS) -fPIC -fvisibility=hidden -DMHA_BUILDING -c $< -o $@

KERNEL_BUILD = $(CC) $(ALL_CFLAGS) $(KERNEL_CFLAGS) $(OPENMP) $(X86_KERNELS) -fPIC \
	-fvisibility=hidden -DMHA_BUILDING -c lib/kernel.c
build/lib/kernel_f64_base.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DSFX=f64_base -DVB=16 -o $@
build/lib/kernel_f32_base.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DMHA_F32 -DSFX=f32_base -DVB=16 -o $@
build/lib/kernel_f64_avx2.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DSFX=f64_avx2 -DVB=32 -mavx2 -mfma -o $@
build/lib/kernel_f32_avx2.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DMHA_F32 -DSFX=f32_avx2 -DVB=32 -mavx2 -mfma -o $@
build/lib/kernel_f64_avx512.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DSFX=f64_avx512 -DVB=64 -mavx512f -mfma -o $@
build/lib/kernel_f32_avx512.o: lib/kernel.c lib/kernel.h build/.flags
	@mkdir -p $(@D)
	$(KERNEL_BUILD) -DMHA_F32 -DSFX=f32_avx512 -DVB=64 -mavx512f -mfma -o $@

build/cli/%.o: cli/%.c cli/*.h lib/mha.h build/.flags
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(CJSON_CFLAGS) -c $< -o $@

build/tests/%.o: tests/%.c tests/*.h lib/mha.h build/.flags
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -c $< -o $@

lib/libmha.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

lib/libmha.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libmha.so.$(SOVERSION) $(LDFLAGS) $(OPENMP) -o $@ $^ -lm

mha: $(CLI_OBJ) lib/libmha.a
	$(CC) $(LDFLAGS) $(OPENMP) -o $@ $(CLI_OBJ) lib/libmha.a $(CJSON_LIBS) -lm

tests/conformance: build/tests/conformance.o lib/libmha.a
	$(CC) $(LDFLAGS) $(OPENMP) -o $@ build/tests/conformance.o lib/libmha.a $(CJSON_LIBS) -lm

build/tests/conformance.o: tests/conformance.c lib/mha.h build/.flags
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(CJSON_CFLAGS) -c $< -o $@

tests/test_lib: $(TEST_OBJ) lib/libmha.a
	$(CC) $(LDFLAGS) $(OPENMP) -o $@ $(TEST_OBJ) lib/libmha.a $(CHECK_LIBS) -lm

deps:
	@command -v dpkg >/dev/null 2>&1 || { echo "deps: not Debian; install: $(DEB_PACKAGES)"; exit 0; }; \
	missing=""; \
	for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing Debian packages:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
		else \
			echo "missing Debian packages:$$missing"; echo "as root: apt-get install$$missing"; exit 1; \
		fi; \
	fi

demo: deps
	$(MAKE) all
	./mha forward -x samples/two-head-causal/x.json -w samples/two-head-causal/weights.json \
		--heads 2 --causal --scale seqlen --print all

check: deps
	$(MAKE) STRICT=-Werror all tests/test_lib
	$(MAKE) STRICT=-Werror test-unit test-cli test-numpy test-formats test-npy test-samples \
		test-docs test-install
	@echo "make check: all tests passed"

# mha against PyTorch (and the machine's GEMM rate) on this machine: not part of check
BENCH_PACKAGES = python3-torch python3-numpy libopenblas0-pthread

bench/bench_mha: bench/bench_mha.c lib/libmha.a lib/mha.h
	$(CC) $(ALL_CFLAGS) $(OPENMP) -o $@ bench/bench_mha.c lib/libmha.a -lm

bench: deps
	@missing=""; for p in $(BENCH_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || true; \
	fi
	$(MAKE) bench/bench_mha
	$(PYTHON) bench/bench.py bench/bench_mha

# the ONNX Attention operator's backend cases, read where they are (never copied)
CONFORMANCE_DIR ?= ../shared/conformance/onnx-attention

conformance: deps
	$(MAKE) STRICT=-Werror mha tests/conformance
	./tests/conformance --mha ./mha $(CONFORMANCE_DIR)

test-unit: tests/test_lib
	CK_FORK=yes ./tests/test_lib

test-cli: mha
	sh tests/cli/run.sh

test-numpy: mha
	$(PYTHON) tests/numpy_check.py ./mha

test-formats: mha
	$(PYTHON) tests/formats_check.py ./mha

test-npy: mha
	$(PYTHON) tests/npy_check.py ./mha

test-samples: mha
	sh samples/run.sh

test-docs: mha
	sh tests/doc_examples.sh README.md man/mha.1

test-install: all
	sh tests/install_test.sh

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 755 mha $(DESTDIR)$(BINDIR)/mha
	install -m 644 lib/libmha.a $(DESTDIR)$(LIBDIR)/libmha.a
	install -m 755 lib/libmha.so $(DESTDIR)$(LIBDIR)/libmha.so.$(VERSION)
	ln -sf libmha.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmha.so.$(SOVERSION)
	ln -sf libmha.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libmha.so
	install -m 644 lib/mha.h $(DESTDIR)$(INCLUDEDIR)/mha.h
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
		'Name: mha' 'Description: multi-head attention, exactly' 'Version: $(VERSION)' \
		'Libs: -L$${libdir} -lmha' 'Libs.private: -lm $(OPENMP)' 'Cflags: -I$${includedir}' \
		> $(DESTDIR)$(PKGCONFIGDIR)/mha.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/mha.pc
	install -m 644 man/mha.1 $(DESTDIR)$(MANDIR)/man1/mha.1

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/mha $(DESTDIR)$(LIBDIR)/libmha.a \
		$(DESTDIR)$(LIBDIR)/libmha.so $(DESTDIR)$(LIBDIR)/libmha.so.$(SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libmha.so.$(VERSION) $(DESTDIR)$(INCLUDEDIR)/mha.h \
		$(DESTDIR)$(PKGCONFIGDIR)/mha.pc $(DESTDIR)$(MANDIR)/man1/mha.1

clean:
	rm -rf build mha lib/libmha.a lib/libmha.so tests/test_lib tests/conformance bench/bench_mha
