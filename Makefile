# loom: the two commands of the quickstart and a few helpers.
#   make demo   install missing Debian packages, build, prepare the embedded data, train
#   make test   build and run every test (CTest)
#   make demo-vqa  the vision-language demo: synthetic shapes VQA data, a tiny Qwen2.5-VL (~1 min)
BUILD ?= build
JOBS ?= $(shell nproc)
LOOM := $(BUILD)/loom
DEMO_DATA := data/demo

# Debian packages needed to build and test (python3-torch: the PyTorch reference checks;
# nodejs/npm: the JavaScript tokenizer cross-checks; Open MPI: ranks; libjpeg-turbo: images;
# python3-pil: the image-preprocessing reference check; libdnnl-dev: oneDNN GEMMs;
# librsvg2-dev: PNG plots; clang + libclang-rt: libFuzzer for make fuzz; libmicrohttpd-dev:
# loom runs serve; chromium + python3-websocket: its page test in headless Chromium;
# slurm-wlm + munge: the Slurm launcher's test against a real slurmctld/slurmd; python3-regex:
# the tokenizer pre-split cross-check against Python's regex).
# .ci/run installs exactly this list through `make deps`.
DEB_PACKAGES := build-essential cmake pkg-config libyaml-dev libpcre2-dev libjansson-dev \
  libopenblas-dev libsqlite3-dev libopenmpi-dev openmpi-bin python3-torch python3-numpy \
  libjpeg62-turbo-dev python3-pil libdnnl-dev librsvg2-dev clang libclang-rt-14-dev \
  libmicrohttpd-dev chromium python3-websocket slurm-wlm munge python3-regex zlib1g-dev \
  libzstd-dev iproute2 libnetfilter-queue-dev iptables

.PHONY: all build deps demo demo-data demo-vqa test test-asan fuzz clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo-data: build
	@mkdir -p $(DEMO_DATA)
	@test -f $(DEMO_DATA)/corpus.txt || $(LOOM) data synth-text --out $(DEMO_DATA)/corpus.txt --bytes 2000000 --seed 1
	@test -f $(DEMO_DATA)/tokenizer.json || $(LOOM) data train-tokenizer --vocab-size 512 --out $(DEMO_DATA)/tokenizer.json $(DEMO_DATA)/corpus.txt
	@test -f $(DEMO_DATA)/train.bin || $(LOOM) data tokenize --tokenizer $(DEMO_DATA)/tokenizer.json --out $(DEMO_DATA)/train.bin $(DEMO_DATA)/corpus.txt

demo: demo-data
	$(LOOM) train configs/demo.yaml

demo-vqa: build
	@test -f data/vqa/synth_vqa.json || $(LOOM) data synth-vqa --out data/vqa --samples 10000 --shard-size 1000
	$(LOOM) train configs/vqa_demo.yaml

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 2

# The sanitizer build (ASan + UBSan) runs the same suite.
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j 2

# Fuzzing (clang + libFuzzer, ASan + UBSan): every tests/fuzz/fuzz_*.c for FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DLOOM_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	@scripts/run_fuzz.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
