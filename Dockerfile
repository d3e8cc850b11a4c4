# syntax=docker/dockerfile:1
#
# canopy's image: both binaries, static (CGO_ENABLED=0), on distroless
# static as a non-root user. The Helm chart (deploy/helm/canopy) runs the
# default target, setting the command to /projector or /conductor-gateway;
# the projector and conductor-gateway targets are single-binary images.
#
#   docker build -t canopy .                                   # both binaries
#   docker build --target conductor-gateway -t canopy-gateway .
#
# Checked by deploy/helm/dockerfile_test.go (no Docker engine is needed).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a source change does not download them again;
# third_party holds the patched kfake that go.mod replaces.
COPY go.mod go.sum ./
COPY third_party/ third_party/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# Pebble builds without cgo; static binaries need no libc in the image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/projector ./cmd/conductor-gateway

# One binary each.
FROM gcr.io/distroless/static-debian12:nonroot AS projector
COPY --from=build /out/projector /projector
USER 65532:65532
# Pebble's state: mount a volume here (the chart mounts one per pod).
VOLUME ["/var/lib/canopy"]
EXPOSE 8081
ENTRYPOINT ["/projector"]
CMD ["run"]

FROM gcr.io/distroless/static-debian12:nonroot AS conductor-gateway
COPY --from=build /out/conductor-gateway /conductor-gateway
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/conductor-gateway"]

# The default target, the one the chart runs: both binaries.
FROM gcr.io/distroless/static-debian12:nonroot AS canopy
COPY --from=build /out/projector /projector
COPY --from=build /out/conductor-gateway /conductor-gateway
USER 65532:65532
ENTRYPOINT ["/projector"]
CMD ["run"]
