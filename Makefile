# kvchat: the only build entry. `make run` and `make test` install missing Debian packages first.
#   make            build build/kvchat (CUDA backend too when nvcc is found: CUDA=auto|0|1)
#   make run        download GPT-2 124M if needed, then open the chat
#   make demo       the chat on the small English model kvchat ships (assets/models/demo, offline)
#   make test       unit, reference (NumPy), CLI and sanitizer tests; ends with "N passed, N failed"
#   make emu        the CUDA backend on the emulated device: build/emu/kvchat and build/emu/unit_tests
#   make bundle     the GPU check's bundle for an H200: build/gpu-bundle (tests/gpu/bundle.sh)
#   make tsan       the engine and chat-model unit tests under ThreadSanitizer (make test runs them too)
#   make bench      kvchat bench and bench --turns on a random 124M-shaped checkpoint
#   make bench-tui  decode speed with the TUI open vs chat --no-tui, and idle CPU
#   make bench-types the cache's and the weights' types against f32: PPL and KL, one table
#                   (TYPES_MODEL=DIR, TYPES_TEXT=FILE, TYPES_OPTS="--tokens N")
#   make bench-peer the decode product's pace per core (build/matvec_bw), then kvchat against
#                   llama.cpp's llama-bench, side by side (LLAMA_CPP=DIR; skipped without it)
#   make fuzz       build the libFuzzer targets with clang and run each briefly
#   make test-gpt2  the known greedy continuation of real GPT-2 124M weights (needs them)
#   make install    build/kvchat, its tokenizer and man page under PREFIX (/usr/local); uninstall

CC      ?= cc
ARCH    ?= native
BUILD   ?= build
PYTHON  ?= /usr/bin/python3
CUDA    ?= auto
CUDA_HOME ?= /usr/local/cuda
MODEL   ?=
PREFIX  ?= /usr/local
FUZZ_SECONDS ?= 30

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PKGS := gcc make libncurses-dev libreadline-dev libopenblas-dev libjansson-dev libpcre2-dev libzip-dev libcurl4-openssl-dev libssl-dev ca-certificates
TEST_PKGS := python3 python3-numpy python3-regex python3-torch tmux g++ clang-format
FUZZ_PKGS := clang libclang-rt-dev

NVCC := $(shell command -v nvcc 2>/dev/null || { [ -x $(CUDA_HOME)/bin/nvcc ] && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(CUDA),auto)
  CUDA := $(if $(NVCC),1,0)
endif
CUDA_SRC := $(wildcard kernels/cuda/*.cu)
# the objects whose code depends on the setting (KVCHAT_CUDA) are made again when it changes: a
# CUDA=0 build's backend.o linked into a CUDA build made a binary that never loads its backend
CUDA_SET := $(BUILD)/obj/cuda-setting
$(shell mkdir -p $(BUILD)/obj; [ "$$(cat $(CUDA_SET) 2>/dev/null)" = "$(CUDA)" ] \
    || echo "$(CUDA)" > $(CUDA_SET))
$(BUILD)/obj/kernels/backend.o $(BUILD)/obj/tests/unit/test_cuda.o: $(CUDA_SET)

WARN    := -Wall -Wextra -Wshadow -Wno-unknown-pragmas -Wno-format-truncation
NVCC_WARN := -Xcompiler -Wall,-Wextra
ifeq ($(CI),true)
  WARN  += -Werror
  NVCC_WARN += -Werror all-warnings -Xcompiler -Werror
endif
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -march=$(ARCH) -fopenmp -D_GNU_SOURCE $(WARN) -MMD -MP \
           -I/usr/include/x86_64-linux-gnu/openblas-pthread \
           -DKVCHAT_ASSETS='"$(CURDIR)/assets"' -DNCURSES_WIDECHAR=1
LDLIBS  := -lreadline -lncursesw -lopenblas -ljansson -lpcre2-8 -lzip -lcurl -lcrypto -lm -lpthread
LDFLAGS += -fopenmp

# BUNDLE=1: the binaries find their libraries beside them first (tests/gpu/bundle.sh); DT_RPATH,
# not RUNPATH, so that it holds for the libraries' own dependencies too
ifeq ($(BUNDLE),1)
  LDFLAGS += -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN'
endif
LIB_SRC := $(wildcard kernels/*.c kernels/cpu/*.c model/*.c ui/*.c app/chat/*.c app/session/*.c \
           app/cmd/*.c app/bench/*.c app/hub/*.c) \
           $(filter-out app/main.c,$(wildcard app/*.c))
UNIT_SRC := $(wildcard tests/unit/*.c)

ifeq ($(CUDA),1)
ifneq ($(CUDA_SRC),)
  # cubins for the GPUs people own (A100 80, RTX 30 86, RTX 40 / L4 89, H100/H200 90, and the
  # Blackwells 100 and 120 where this toolkit knows them), and PTX of the newest for what comes later
  NVCC_CODES := $(shell $(NVCC) --list-gpu-code 2>/dev/null)
  CUDA_SMS := $(foreach a,80 86 89 90 100 120,$(if $(filter sm_$(a),$(NVCC_CODES)),$(a)))
  # Every one of them where the build travels or stays (CUDA_ALL=1: the bundle, make install, CI);
  # else the GPUs present, where the toolkit knows them (a first build in a minute, not seven
  # architectures' worth), or with none present the oldest's PTX alone, which the driver compiles
  # for any newer GPU at its first use
  CUDA_GPUS := $(sort $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
                 2>/dev/null | tr -d .))
  CUDA_HERE := $(foreach a,$(CUDA_GPUS),$(if $(filter sm_$(a),$(NVCC_CODES)),$(a)))
  ifeq ($(CI),true)
    CUDA_ALL ?= 1
  endif
  ifneq ($(filter install,$(MAKECMDGOALS)),)
    CUDA_ALL ?= 1
  endif
  ifeq ($(CUDA_ALL),1)
    CUDA_BUILT := $(CUDA_SMS)
  else
    CUDA_BUILT := $(CUDA_HERE)
  endif
  CUDA_PTX := $(if $(CUDA_BUILT),$(lastword $(CUDA_BUILT)),$(firstword $(CUDA_SMS)))
  CUDA_ARCH ?= $(foreach a,$(CUDA_BUILT),-gencode arch=compute_$(a),code=sm_$(a)) \
               -gencode arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
  # the objects are made again when the architectures change (a make install after a make)
  CUDA_STAMP := $(BUILD)/obj/kernels/cuda/architectures
  $(shell mkdir -p $(dir $(CUDA_STAMP)); [ "$$(cat $(CUDA_STAMP) 2>/dev/null)" = "$(CUDA_ARCH)" ] \
      || echo "$(CUDA_ARCH)" > $(CUDA_STAMP))
  CFLAGS  += -DKVCHAT_CUDA
  # the binary loads the CUDA backend and its libraries only when a GPU is used
  # (kernels/backend.c), and exports what the backend calls back (err_*, dt_*) to it
  CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt \
               -lstdc++
  LDFLAGS += -rdynamic
  CUDA_OBJ = $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  CUDA_SO := $(BUILD)/libkvchat-cuda.so
endif
endif

OBJ      = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
ASAN_OBJ = $(LIB_SRC:%.c=$(BUILD)/asan/%.o)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: all run demo test unit asan emu emu-traced bundle tsan fuzz bench bench-peer bench-tui \
        bench-types test-gpt2 deps test-deps clean install uninstall
all: $(BUILD)/kvchat $(CUDA_SO)

$(BUILD)/kvchat: $(BUILD)/obj/app/main.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(CUDA_SO): $(CUDA_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(CUDA_LIBS)

# the unit tests call the CUDA backend's own functions: linked in
$(BUILD)/unit_tests: $(UNIT_SRC:%.c=$(BUILD)/obj/%.o) $(OBJ) $(CUDA_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# the decode product's pace per core against a plain read, from memory and from cache (bench-peer)
$(BUILD)/matvec_bw: $(BUILD)/obj/tests/peer/matvec_bw.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(if $(PROGRESS),@echo "  compiling $<")
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/obj/%.o: %.cu $(CUDA_STAMP)
	@mkdir -p $(dir $@)
	$(if $(PROGRESS),@echo "  compiling $< for $(or $(CUDA_BUILT),PTX) $(if $(CUDA_BUILT),+ PTX)")
	$(NVCC) -O2 -std=c++17 $(CUDA_ARCH) $(NVCC_WARN) -Xcompiler -fPIC -MMD -MP -c -o $@ $<

# AddressSanitizer + UBSan build of the binary and the unit tests.
$(BUILD)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DKVCHAT_CUDA,$(CFLAGS)) -O1 $(SAN) -c -o $@ $<

# the sanitizer build is the CPU build (the CUDA runtime is not instrumented)
CPU_LDLIBS := -lreadline -lncursesw -lopenblas -ljansson -lpcre2-8 -lzip -lcurl -lcrypto -lm -lpthread
$(BUILD)/asan/kvchat: $(BUILD)/asan/app/main.o $(ASAN_OBJ)
	$(CC) $(LDFLAGS) $(SAN) -o $@ $^ $(CPU_LDLIBS)

$(BUILD)/asan/unit_tests: $(UNIT_SRC:%.c=$(BUILD)/asan/%.o) $(ASAN_OBJ)
	$(CC) $(LDFLAGS) $(SAN) -o $@ $^ $(CPU_LDLIBS)

asan: $(BUILD)/asan/kvchat $(BUILD)/asan/unit_tests

# ThreadSanitizer build of the unit tests, for those where threads meet: the engine's worker thread and
# the calls that reach it while a reply streams. OpenMP's runtime is not instrumented (its barriers
# would read as races), so the tests run on one core, where the kernels start no OpenMP threads.
TSAN_OBJ = $(LIB_SRC:%.c=$(BUILD)/tsan/%.o)
$(BUILD)/tsan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DKVCHAT_CUDA,$(CFLAGS)) -O1 -fsanitize=thread -c -o $@ $<

$(BUILD)/tsan/unit_tests: $(UNIT_SRC:%.c=$(BUILD)/tsan/%.o) $(TSAN_OBJ)
	$(CC) $(LDFLAGS) -fsanitize=thread -o $@ $^ $(CPU_LDLIBS)

TSAN_TESTS := engine/ ui/
tsan: deps $(BUILD)/tsan/unit_tests
	TSAN_OPTIONS=halt_on_error=1 taskset -c 0 $(BUILD)/tsan/unit_tests $(TSAN_TESTS)

# The emulated CUDA device (tests/cuda_emu/): the CUDA backend's own .cu files built by nvcc-emu into
# programs that run their kernels on the CPU, everything under AddressSanitizer and UBSan; its
# kvchat's --device cuda is the emulated H200.
EMU      := $(BUILD)/emu
NVCC_EMU := CUDA_EMU_CACHE=$(abspath $(EMU))/cache tests/cuda_emu/nvcc-emu
EMU_SRC  := $(wildcard tests/cuda_emu/runtime/* tests/cuda_emu/include/* tests/cuda_emu/rewrite.c tests/cuda_emu/nvcc-emu)
EMU_OBJ   = $(LIB_SRC:%.c=$(EMU)/obj/%.o) $(CUDA_SRC:%.cu=$(EMU)/obj/%.o)

$(EMU)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -DKVCHAT_CUDA,$(CFLAGS)) -DKVCHAT_CUDA -DKVCHAT_CUDA_EMU $(SAN) -c -o $@ $<

$(EMU)/obj/%.o: %.cu $(EMU_SRC)
	@mkdir -p $(dir $@)
	$(NVCC_EMU) -O2 -g $(SAN) -std=c++17 $(NVCC_WARN) -MMD -MP -c -o $@ $<

$(EMU)/kvchat: $(EMU)/obj/app/main.o $(EMU_OBJ) $(EMU_SRC)
	$(NVCC_EMU) $(SAN) -fopenmp -o $@ $(filter %.o,$^) $(CPU_LDLIBS)

$(EMU)/unit_tests: $(UNIT_SRC:%.c=$(EMU)/obj/%.o) $(EMU_OBJ) $(EMU_SRC)
	$(NVCC_EMU) $(SAN) -fopenmp -o $@ $(filter %.o,$^) $(CPU_LDLIBS)

emu: $(EMU)/kvchat $(EMU)/unit_tests

# The twins with every load and store of device code calling the emulator (nvcc-emu
# --emu-trace-memory): under CUDA_EMU_STRICT=1 a store lets other threads run first (lost updates
# show) and a read of bytes never written fails the launch; make test runs them
$(EMU)/traced/%.o: %.cu $(EMU_SRC)
	@mkdir -p $(dir $@)
	$(NVCC_EMU) -O2 -g $(SAN) -std=c++17 $(NVCC_WARN) --emu-trace-memory -MMD -MP -c -o $@ $<

$(EMU)/traced/unit_tests: $(UNIT_SRC:%.c=$(EMU)/obj/%.o) $(LIB_SRC:%.c=$(EMU)/obj/%.o) \
		$(CUDA_SRC:%.cu=$(EMU)/traced/%.o) $(EMU_SRC)
	$(NVCC_EMU) $(SAN) -fopenmp -o $@ $(filter %.o,$^) $(CPU_LDLIBS)

emu-traced: $(EMU)/traced/unit_tests

bundle: deps
	tests/gpu/bundle.sh $(BUILD)/gpu-bundle

deps:
	@missing=$$(for p in $(PKGS) $(EXTRA_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# the build is quiet (-s): said first, since a first build takes a minute or two
BUILDING = @[ -x $(BUILD)/kvchat ] || echo "building $(BUILD)/kvchat (a first build takes a minute or two)"
run: deps
	$(BUILDING)
	@$(MAKE) -s --no-print-directory all PROGRESS=1
	@dir="$(MODEL)"; [ -n "$$dir" ] || dir="$${KVCHAT_MODEL:-$${XDG_CACHE_HOME:-$$HOME/.cache}/kvchat/models/gpt2}"; \
	if [ ! -s "$$dir/model.safetensors" ] && [ ! -s "$$dir/pytorch_model.bin" ]; then \
	  echo "No GPT-2 weights in $$dir: downloading GPT-2 124M from Hugging Face (~550 MB)."; \
	  $(BUILD)/kvchat get-model gpt2 $(if $(MODEL),--dir "$(MODEL)") >/dev/null || { \
	    echo "Offline? 'make demo' opens the chat on the small English model kvchat ships."; exit 1; }; \
	fi; \
	$(BUILD)/kvchat -m "$$dir" 

test: deps
	@$(MAKE) --no-print-directory deps PKGS="$(TEST_PKGS)"
	@$(MAKE) --no-print-directory -j$(shell nproc) all $(BUILD)/unit_tests asan emu emu-traced \
		$(BUILD)/tsan/unit_tests
	@PYTHON=$(PYTHON) BUILD=$(BUILD) bash tests/run.sh

# a random-weight model of GPT-2 124M's shape: real sizes and speeds, noise for text
$(BUILD)/m124/model.safetensors: | $(BUILD)/kvchat
	$(BUILD)/kvchat make-tiny-model $(BUILD)/m124 --layers 12 --heads 12 --embd 768 --ctx 1024

demo: deps
	$(BUILDING)
	@$(MAKE) -s --no-print-directory all PROGRESS=1
	$(BUILD)/kvchat -m assets/models/demo

bench-tui: deps
	@$(MAKE) -s --no-print-directory all $(BUILD)/m124/model.safetensors
	bash tests/bench_tui.sh $(BUILD)/kvchat $(BUILD)/m124

bench: deps
	@$(MAKE) -s --no-print-directory all $(BUILD)/m124/model.safetensors
	$(BUILD)/kvchat bench -m $(BUILD)/m124 --json $(BUILD)/bench.json
	$(BUILD)/kvchat bench --turns -m $(BUILD)/m124 --json $(BUILD)/bench-turns.json

bench-peer: deps
	@$(MAKE) -s --no-print-directory all $(BUILD)/matvec_bw $(BUILD)/m124/model.safetensors
	LLAMA_CPP=$(LLAMA_CPP) PEER_DIR=$(BUILD)/peer bash tests/peer/bench_peer.sh -m $(BUILD)/m124

test-gpt2: all
	@bash tests/gpt2_known.sh $(BUILD)/kvchat "$(MODEL)"

# what the cache's and the weights' types cost a model: perplexity and KL against f32, one table
TYPES_MODEL ?= assets/models/demo
TYPES_TEXT ?= $(BUILD)/train/corpus/heldout-austen.txt
bench-types: deps
	@$(MAKE) -s --no-print-directory all
	bash tests/bench_types.sh $(BUILD)/kvchat $(TYPES_MODEL) $(TYPES_TEXT) $(TYPES_OPTS)

fuzz: deps
	@$(MAKE) --no-print-directory deps PKGS="$(FUZZ_PKGS)"
	@mkdir -p $(BUILD)/fuzz
	clang -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $(BUILD)/fuzz/safetensors \
	  tests/fuzz/fuzz_safetensors.c model/safetensors.c kernels/err.c -ljansson
	clang -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DKVCHAT_ASSETS='"$(CURDIR)/assets"' \
	  -o $(BUILD)/fuzz/tokenizer tests/fuzz/fuzz_tokenizer.c model/tokenizer.c model/tok_encode.c kernels/err.c -ljansson -lpcre2-8
	clang -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $(BUILD)/fuzz/session \
	  -DNCURSES_WIDECHAR=1 -DKVCHAT_ASSETS='"$(CURDIR)/assets"' tests/fuzz/fuzz_session.c \
	  app/session/session_file.c app/session/settings.c app/chat/records.c app/chat/template.c \
	  model/tokenizer.c model/tok_encode.c model/events.c model/event_schema.c kernels/dtype.c \
	  ui/cache_model.c ui/cache_memory.c ui/cache_log.c ui/cache_query.c ui/cache_draft.c \
	  ui/cache_panel.c ui/panel_conv_table.c ui/panel_log.c ui/screen.c ui/fields.c \
	  app/session/fingerprint.c model/checkpoint.c app/files.c model/pytorch.c \
	  model/pytorch_zip.c model/pickle.c model/safetensors.c -lzip -lcrypto \
	  model/draft_opts.c \
	  ui/layout.c ui/text.c ui/format.c ui/graph.c model/window.c kernels/err.c -ljansson -lncursesw -lm \
	  -lpcre2-8
	clang -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $(BUILD)/fuzz/pickle \
	  tests/fuzz/fuzz_pickle.c model/pickle.c model/pytorch.c model/pytorch_zip.c model/safetensors.c kernels/err.c -ljansson -lzip
	@mkdir -p $(BUILD)/fuzz/corpus-st $(BUILD)/fuzz/corpus-tok $(BUILD)/fuzz/corpus-session $(BUILD)/fuzz/corpus-pickle
	$(BUILD)/fuzz/safetensors -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz/corpus-st tests/fuzz/seeds-safetensors
	$(BUILD)/fuzz/tokenizer -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz/corpus-tok tests/fuzz/seeds-tokenizer
	$(BUILD)/fuzz/session -max_total_time=$(FUZZ_SECONDS) -max_len=16384 $(BUILD)/fuzz/corpus-session tests/fuzz/seeds-session
	$(BUILD)/fuzz/pickle -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz/corpus-pickle tests/fuzz/seeds-pickle

# the binary finds PREFIX/share/kvchat from PREFIX/bin (app/files.c: assets_dir)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/kvchat \
	    $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BUILD)/kvchat $(DESTDIR)$(PREFIX)/bin/kvchat
	$(if $(CUDA_SO),install -D -m 755 $(CUDA_SO) $(DESTDIR)$(PREFIX)/lib/kvchat/libkvchat-cuda.so)
	install -m 644 assets/vocab.json assets/merges.txt $(DESTDIR)$(PREFIX)/share/kvchat/
	install -m 644 assets/kvchat.1 $(DESTDIR)$(PREFIX)/share/man/man1/kvchat.1

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/kvchat $(DESTDIR)$(PREFIX)/lib/kvchat/libkvchat-cuda.so \
	    $(DESTDIR)$(PREFIX)/share/man/man1/kvchat.1 \
	    $(DESTDIR)$(PREFIX)/share/kvchat/vocab.json $(DESTDIR)$(PREFIX)/share/kvchat/merges.txt
	rmdir $(DESTDIR)$(PREFIX)/share/kvchat $(DESTDIR)$(PREFIX)/lib/kvchat 2>/dev/null || true

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
