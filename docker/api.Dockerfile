# shardwork/api: the Shardwork API (`shardwork serve`).
#
#   docker build -f docker/api.Dockerfile -t shardwork/api .
#
# Offline (no registry reachable), `scripts/images` makes the runtime base from Debian's packages
# under the name below and builds this file with BINARY_STAGE=prebuilt: the same runtime stage,
# over a binary built on the host.
#
# Nothing secret is inside: SHARDWORK_API__JWT_SECRET, SHARDWORK_API__SEALING_SECRET and
# SHARDWORK_API__VALIDATOR_ADDRESSES come from the environment (`shardwork secrets` prints fresh
# ones), and `serve` exits at once naming whichever is missing, before it connects to anything.
# Run it with a read-only root: it writes only /var/lib/shardwork (SHARDWORK_DATA_DIR).
ARG RUNTIME_BASE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARY_STAGE=compiled

FROM rust:1.95-bookworm AS compiled
WORKDIR /src
COPY . .
# --locked: the committed Cargo.lock pins core2 0.4.0, whose versions are all yanked; a fresh
# resolution would fail, so the lock must be used as is.
RUN cargo build --release --locked --bin shardwork \
    && mkdir -p /out/bin /out/data \
    && cp target/release/shardwork /out/bin/

# The offline path: the binary scripts/images put in the build context.
FROM scratch AS prebuilt
COPY .tools/images/bin/shardwork /out/bin/
COPY .tools/images/data/ /out/data/

FROM ${BINARY_STAGE} AS binary

FROM ${RUNTIME_BASE} AS runtime
COPY --from=binary /out/bin/shardwork /usr/local/bin/shardwork
COPY --from=binary --chown=65532:65532 /out/data/ /var/lib/shardwork/
USER 65532:65532
WORKDIR /var/lib/shardwork
ENV SHARDWORK_DATA_DIR=/var/lib/shardwork \
    SHARDWORK_API__BIND=0.0.0.0:8080 \
    SHARDWORK_LOG=info
VOLUME ["/var/lib/shardwork"]
EXPOSE 8080
# Ready: GET /readyz on the bound port answers 200 (leader or standby).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["shardwork", "health"]
ENTRYPOINT ["shardwork"]
CMD ["serve"]
