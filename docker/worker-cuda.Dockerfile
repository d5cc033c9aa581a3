# shardwork/worker-cuda: the node image's GPU variant, the same `shardwork-node` built with the
# `cuda` feature (candle's CUDA kernels). Needs the NVIDIA container toolkit on the host
# (`deploy.resources.reservations.devices` in compose). It behaves as docker/node.Dockerfile
# does (user 65532, key from the environment or a mounted file, a read-only root and one data
# folder, the binary as its health check) on NVIDIA's runtime image, which carries the CUDA
# libraries. Not built here: no NVIDIA registry and no GPU (scripts/cuda-check compiles the
# feature instead).
#
#   docker build -f docker/worker-cuda.Dockerfile -t shardwork/worker-cuda .
FROM nvidia/cuda:12.6.3-devel-ubuntu24.04 AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates build-essential pkg-config \
    && rm -rf /var/lib/apt/lists/*
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain 1.95.0
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY . .
# Compute capability of the target GPUs (80: A100, 90: H100/H200); candle's kernels are built
# for it at compile time.
ARG CUDA_COMPUTE_CAP=90
ENV CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP}
# Built alone, with its own features only: none of the CLI's (the `adversaries` test workers).
RUN cargo build --release --locked -p shardwork-node --bin shardwork-node --features cuda

FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/shardwork nonroot \
    && mkdir -p /var/lib/shardwork && chown 65532:65532 /var/lib/shardwork
COPY --from=build /src/target/release/shardwork-node /usr/local/bin/shardwork-node
USER 65532:65532
WORKDIR /var/lib/shardwork
ENV SHARDWORK_LOG=info
VOLUME ["/var/lib/shardwork"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s CMD ["shardwork-node", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["shardwork-node"]
CMD ["worker"]
