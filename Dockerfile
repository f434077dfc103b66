# syntax=docker/dockerfile:1
# apf-monitor's container image (README, "Run it in a cluster"):
#   docker build -t apf-monitor:VERSION --build-arg VERSION=VERSION .
# The binary is built with the release command of the README and CI's lock discipline (`--locked`: Cargo.lock as
# committed; .ci/run checks this file says so), then copied alone into a distroless image: glibc and CA
# certificates, no shell, no package manager, user 65532.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Dependencies in a layer of their own, rebuilt only when Cargo.toml or Cargo.lock change: a build against dummy
# sources (Cargo.toml names a bench, so benches/parse.rs must exist too).
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && echo 'fn main() {}' > benches/parse.rs \
    && cargo build --release --locked \
    && rm -rf src benches
COPY src src
COPY benches benches
# The real sources may carry older times than the dummy build: touched, cargo rebuilds the crate itself.
RUN touch src/lib.rs src/main.rs \
    && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="apf-monitor" \
      org.opencontainers.image.description="Watches Kubernetes API Priority and Fairness on every kube-apiserver replica and warns before clients get 429s" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/apf-monitor/apf-monitor" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /src/target/release/apf-monitor /apf-monitor
USER 65532:65532
# /metrics, the status page, /healthz, /readyz, the silences API (listen: 0.0.0.0:9864).
EXPOSE 9864
ENTRYPOINT ["/apf-monitor"]
CMD ["serve"]
