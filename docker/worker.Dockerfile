# A CPU node: `shardwork-node worker` (the default command) or `shardwork-node validator`. The
# binary links no database driver and no API server, and the node holds no database
# credentials: it talks to the API, RabbitMQ and Kubo only. Its key comes from
# SHARDWORK_NODE_KEY (or --key-file on a secret).
# Build from the repository root:  docker build -f docker/worker.Dockerfile -t shardwork/worker .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p shardwork-node --bin shardwork-node

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/shardwork --create-home shardwork
COPY --from=build /src/target/release/shardwork-node /usr/local/bin/shardwork-node
USER shardwork
WORKDIR /var/lib/shardwork
# SIGTERM (docker stop) lets the current task finish and submit before the process exits;
# give it time with `stop_grace_period` in compose.
STOPSIGNAL SIGTERM
ENTRYPOINT ["shardwork-node"]
CMD ["worker", "--work-dir", "/var/lib/shardwork/node"]
