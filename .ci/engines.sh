#!/usr/bin/env bash
# CI: the serving engine and harness some tests run against, installed into the active venv (source this file from
# .ci/run after the project is installed). Neither is a dependency of queerbench.
#
# - llama-cpp-python[server] 0.3.x: llama.cpp's OpenAI-compatible server (tests/test_llamacpp_server.py). It builds
#   from its sdist (~13 min on 2 cores). The build must be portable: a native build (-DGGML_NATIVE=ON, the default)
#   targets the build machine's CPU and dies with "Illegal instruction" on machines that advertise AVX-512/AMX but
#   cannot run what it emits, so only AVX2/FMA/F16C are switched on. pip's wheel cache keeps the built wheel, so
#   later runs on the same machine install it in seconds.
# - lm-eval 0.4.13 (lm-evaluation-harness; tests/test_lmeval.py). It uses the torch already installed (the CPU
#   wheel .ci/run installs first), not a CUDA one.
set -euo pipefail
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
python -m pip install -q "llama-cpp-python[server]==0.3.36" "lm-eval==0.4.13"
python -c "import llama_cpp, lm_eval, torch; print('engines:', 'llama-cpp-python', llama_cpp.__version__, '| lm-eval', lm_eval.__version__, '| torch', torch.__version__)"
