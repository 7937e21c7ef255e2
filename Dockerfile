# A small image of sessiond: built with the Rust toolchain, run on Debian slim as an unprivileged
# user, data in the /data volume. See "Install" in the README.
#
#   docker build -t sessiond .
#   docker run -d --name sessiond -p 127.0.0.1:8080:8080 -v sessiond-data:/data sessiond
FROM rust:1.95-slim-trixie AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --release && cp target/release/sessiond /usr/local/bin/sessiond

FROM debian:trixie-slim
# CA certificates for HTTPS model endpoints.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home-dir /data --shell /usr/sbin/nologin sessiond \
    && mkdir /data && chown sessiond:sessiond /data
COPY --from=build /usr/local/bin/sessiond /usr/local/bin/sessiond
USER sessiond
# Inside the container sessiond listens on every interface; `-p` decides who can reach it.
ENV SESSIOND_DATA_DIR=/data SESSIOND_BIND=0.0.0.0:8080
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["sessiond"]
CMD ["serve"]
