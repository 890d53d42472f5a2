# troupe-node in a small image. Build from the repository's root:
#   docker build -t troupe-node:dev .
# Stage 1 builds the binary with the pinned toolchain; stage 2 carries only
# the binary (and a user to run it as).

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# Without the line tables the release profile keeps (87 MB), with the
# symbols (18 MB), so that a panic's backtrace still names functions.
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
RUN cargo build --release --locked -p troupe-examples --bin troupe-node \
 && cp target/release/troupe-node /troupe-node

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /data --create-home troupe
COPY --from=build /troupe-node /usr/local/bin/troupe-node
USER troupe
WORKDIR /data
# Remoting and management HTTP (Akka's ports).
EXPOSE 2552 8558
ENTRYPOINT ["/usr/local/bin/troupe-node"]
