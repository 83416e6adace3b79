# The OpenTelemetry Collector (contrib: it has the prometheus receiver and exporter) on busybox.
# The official image is FROM scratch, without a shell or an HTTP client, so Docker could not
# probe its health; busybox adds `wget` for the healthcheck in docker-compose.yml. The collector
# binary is static (CGO off), so it runs on any base. The configuration is mounted by
# docker-compose.yml from deploy/otel-collector.yaml (edit it, then restart the service).
FROM otel/opentelemetry-collector-contrib:0.123.0 AS collector

FROM busybox:1.37.0
COPY --from=collector /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=collector /otelcol-contrib /otelcol-contrib
USER 10001:10001
EXPOSE 4318 8889 13133
ENTRYPOINT ["/otelcol-contrib"]
CMD ["--config", "/etc/otelcol-contrib/config.yaml"]
