# A GPU worker: the same `shardwork-node` binary built with the `cuda` feature (candle's CUDA
# kernels). Needs the NVIDIA container toolkit on the host
# (`deploy.resources.reservations.devices` in compose).
# Build from the repository root:  docker build -f docker/worker-cuda.Dockerfile -t shardwork/worker-cuda .
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
RUN cargo build --release --locked -p shardwork-node --bin shardwork-node --features cuda

FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/shardwork --create-home shardwork
COPY --from=build /src/target/release/shardwork-node /usr/local/bin/shardwork-node
USER shardwork
WORKDIR /var/lib/shardwork
STOPSIGNAL SIGTERM
ENTRYPOINT ["shardwork-node"]
CMD ["worker", "--work-dir", "/var/lib/shardwork/node"]
