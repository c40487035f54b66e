# Thin wrapper over CMake: the build itself is described in CMakeLists.txt.
#   make          configure build/ and build everything
#   make demo     install missing Debian packages, build, run `stagecraft demo`
#   make lab-demo the same on an uneven lab of namespaces, tc links and CPU cgroups (root)
#   make test     install missing Debian packages, build, run every test (ctest)
#   make test-sanitize  the same in build-sanitize/ with AddressSanitizer + UBSan (CPU parts)
#   make clean    remove the build folders (build, build-sanitize, build-release)
# Variables: BUILD_TYPE (RelWithDebInfo), CMAKE_FLAGS (extra -D options), JOBS (cores),
# DEMO_FLAGS (flags for `stagecraft demo`, e.g. DEMO_FLAGS="--steps 100").

BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE ?= address,undefined

.PHONY: all deps build demo lab-demo test test-sanitize clean

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
	./build/cli/stagecraft demo $(DEMO_FLAGS)

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

clean:
	rm -rf build build-sanitize build-release
