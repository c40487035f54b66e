# Thin wrapper over CMake: the build itself is described in CMakeLists.txt.
#   make          configure build/ and build everything
#   make demo     install missing Debian packages, build, run `stagecraft demo`
#   make lab-demo the same on an uneven lab of namespaces, tc links and CPU cgroups (root)
#   make test     install missing Debian packages, build, run every test (ctest)
#   make test-sanitize  the same in build-sanitize/ with AddressSanitizer + UBSan (CPU parts)
#   make fuzz     build the fuzz targets in build-fuzz/ (clang, libFuzzer, ASan + UBSan) and run
#                 each for FUZZ_SECONDS (60) over its corpus in tests/fuzz/corpus/
#   make clean    remove the build folders (build, build-sanitize, build-release, build-fuzz)
# Variables: BUILD_TYPE (RelWithDebInfo), CMAKE_FLAGS (extra -D options), JOBS (cores),
# DEMO_FLAGS (flags for `stagecraft demo`, e.g. DEMO_FLAGS="--steps 100").

BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE ?= address,undefined
FUZZ_SECONDS ?= 60

.PHONY: all deps build demo lab-demo test test-sanitize fuzz clean

all: build

deps:
	@bash deploy/install-deps.sh

build/CMakeCache.txt:
	cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: build/CMakeCache.txt
	cmake --build build -j $(JOBS)

demo: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)
	./build/cli/stagecraft demo --finetune tests/data/hf/llama-tied $(DEMO_FLAGS)

lab-demo: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)
	bash deploy/lab/demo.sh build/cli/stagecraft

test: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)
	cmake --build build -j $(JOBS)
	ctest --test-dir build --output-on-failure -j $(JOBS)

test-sanitize: deps
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DSTAGECRAFT_CUDA=OFF \
	      -DSTAGECRAFT_SANITIZE=$(SANITIZE) $(CMAKE_FLAGS)
	cmake --build build-sanitize -j $(JOBS)
	ctest --test-dir build-sanitize --output-on-failure -j $(JOBS)

fuzz: deps
	@command -v clang >/dev/null || { echo "make fuzz needs clang with libFuzzer" \
	    "(Debian 12: apt-get install clang)"; exit 1; }
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	      -DSTAGECRAFT_CUDA=OFF -DSTAGECRAFT_FUZZ=ON -DSTAGECRAFT_SANITIZE=address,undefined \
	      -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf build build-sanitize build-release build-fuzz
