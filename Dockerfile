# Reclaim: a drop-in CNCF Distribution registry with online garbage collection.
#
#   docker build -t reclaim --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run -p 5000:5000 -v reclaim-data:/var/lib/registry reclaim
#
# Same layout as upstream's image: the binary is `registry`, the config is
# /etc/distribution/config.yml (configs/docker.yml), data lives in the
# /var/lib/registry volume, so it replaces distribution/distribution's image
# without changes to how it is run.
#
# The debug listener (/metrics, /debug/pprof/*, /debug/vars, no
# authentication) is bound to 127.0.0.1:5001 inside the container and is
# neither exposed nor to be published; docs/operations.md ("The debug
# listener") says how to scrape metrics.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# `registry --version` prints these; the variables are upstream's
# (github.com/distribution/distribution/v3/version).
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w \
        -X github.com/distribution/distribution/v3/version.mainpkg=github.com/reclaim-registry/reclaim \
        -X github.com/distribution/distribution/v3/version.version=${VERSION} \
        -X github.com/distribution/distribution/v3/version.revision=${REVISION}" \
      -o /out/registry ./cmd/registry

FROM alpine:3.22
# ca-certificates: TLS to S3/GCS/Azure, token auth servers and Redis over TLS.
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S -g 10001 registry \
 && adduser -S -D -H -u 10001 -G registry -h /var/lib/registry registry \
 && mkdir -p /var/lib/registry /etc/distribution \
 && chown registry:registry /var/lib/registry
COPY --from=build /out/registry /bin/registry
COPY configs/docker.yml /etc/distribution/config.yml
USER registry:registry
VOLUME ["/var/lib/registry"]
EXPOSE 5000
ENTRYPOINT ["registry"]
CMD ["serve", "/etc/distribution/config.yml"]
