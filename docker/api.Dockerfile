# The Shardwork API (`shardwork serve`), also the image the validator runs from.
# Build from the repository root:  docker build -f docker/api.Dockerfile -t shardwork/api .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --locked: the committed Cargo.lock pins core2 0.4.0, whose versions are all yanked; a fresh
# resolution would fail, so the lock must be used as is.
RUN cargo build --release --locked --bin shardwork

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/shardwork --create-home shardwork
COPY --from=build /src/target/release/shardwork /usr/local/bin/shardwork
USER shardwork
WORKDIR /var/lib/shardwork
ENV SHARDWORK_API__BIND=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD ["/bin/sh", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
ENTRYPOINT ["shardwork"]
CMD ["serve"]
