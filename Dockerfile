# syntax=docker/dockerfile:1
# apf-monitor's container image (docs/guides/in-cluster.md):
#   docker build -t apf-monitor:VERSION --build-arg VERSION=VERSION .
# The binary is built with the release command of the README and CI's lock discipline (`--locked`: Cargo.lock as
# committed; .ci/run checks this file says so), then copied alone into a distroless image: glibc and CA
# certificates, no shell, no package manager, user 65532.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Dependencies in a layer of their own, rebuilt only when a manifest or Cargo.lock changes: a build of the workspace
# (the daemon, crates/apf, crates/apf-sim) against dummy sources (the benches the manifests name must exist too).
COPY Cargo.toml Cargo.lock ./
COPY crates/apf/Cargo.toml crates/apf/
COPY crates/apf-sim/Cargo.toml crates/apf-sim/
RUN mkdir -p src benches crates/apf/src crates/apf/benches crates/apf-sim/src crates/apf-sim/benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/apf/src/lib.rs crates/apf-sim/src/lib.rs \
    && for b in benches/round.rs benches/watch_cost.rs crates/apf/benches/parse.rs crates/apf/benches/audit.rs crates/apf-sim/benches/audit.rs crates/apf-sim/benches/engine.rs; do \
         echo 'fn main() {}' > "$b"; done \
    && cargo build --release --locked \
    && rm -rf src crates
# benches/ is not in the image's context: its dummy stays for the manifest's [[bench]].
COPY src src
COPY crates crates
# The status page's and report's markup, compiled into the binary (askama).
COPY templates templates
# The real sources may carry older times than the dummy build: touched, cargo rebuilds the three crates themselves.
RUN touch src/lib.rs src/main.rs crates/apf/src/lib.rs crates/apf-sim/src/lib.rs \
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
