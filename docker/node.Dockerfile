# shardwork/node: the worker (`shardwork-node worker`, the default command) and the validator
# (`shardwork-node validator`). The binary links no database driver and no API server, and the
# node holds no database credentials: it talks to the API, RabbitMQ and Kubo only.
#
#   docker build -f docker/node.Dockerfile -t shardwork/node .
#
# Offline (no registry reachable), `scripts/images` makes the runtime base from Debian's packages
# under the name below and builds this file with BINARY_STAGE=prebuilt: the same runtime stage,
# over a binary built on the host.
#
# Nothing secret is inside. The node's key comes from SHARDWORK_NODE_KEY or a mounted file
# (`--key-file /run/secrets/node-key`); without one it exits at once naming the variable. Run it
# with a read-only root (`--read-only`, compose's `read_only: true`): it writes only its data
# folder, /var/lib/shardwork (model cache, task folders, traces, the health heartbeat).
ARG RUNTIME_BASE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARY_STAGE=compiled

FROM rust:1.95-bookworm AS compiled
WORKDIR /src
COPY . .
# --locked: the committed Cargo.lock pins core2 0.4.0, whose versions are all yanked; a fresh
# resolution would fail, so the lock must be used as is.
# Built alone, with its own features only: none of the CLI's (the `adversaries` test workers).
RUN cargo build --release --locked -p shardwork-node --bin shardwork-node \
    && mkdir -p /out/bin /out/data \
    && cp target/release/shardwork-node /out/bin/

# The offline path: the binary scripts/images put in the build context.
FROM scratch AS prebuilt
COPY .tools/images/bin/shardwork-node /out/bin/
COPY .tools/images/data/ /out/data/

FROM ${BINARY_STAGE} AS binary

FROM ${RUNTIME_BASE} AS runtime
COPY --from=binary /out/bin/shardwork-node /usr/local/bin/shardwork-node
# The one writable folder, owned by the unprivileged user the process runs as.
COPY --from=binary --chown=65532:65532 /out/data/ /var/lib/shardwork/
USER 65532:65532
WORKDIR /var/lib/shardwork
ENV SHARDWORK_LOG=info
VOLUME ["/var/lib/shardwork"]
# Healthy while the process writes its heartbeat (every 10 s) into its work folder.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s CMD ["shardwork-node", "health"]
# SIGTERM (docker stop) gives the current task back (released, its attempt returned) and exits
# 0 within seconds; another worker trains it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["shardwork-node"]
CMD ["worker"]
