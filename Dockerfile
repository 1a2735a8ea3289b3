# fairness-monitor: slim, non-root image. The configuration comes from a mounted file
# (/etc/fairness-monitor/config.yaml) and FAIRNESS_MONITOR__* environment overrides; the
# checkpoint lives on a volume (/var/lib/fairness-monitor).
#   docker build -t fairness-monitor .
#   docker run -v $PWD/monitor.yaml:/etc/fairness-monitor/config.yaml:ro fairness-monitor

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY monitor ./monitor
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-compile . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="fairness-monitor" \
      org.opencontainers.image.description="Streaming fairness monitor for ML models in production" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 monitor \
    && useradd --system --uid 10001 --gid monitor --home-dir /var/lib/fairness-monitor \
       --shell /usr/sbin/nologin monitor \
    && mkdir -p /etc/fairness-monitor /var/lib/fairness-monitor \
    && chown monitor:monitor /var/lib/fairness-monitor
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FAIRNESS_MONITOR__CHECKPOINT__PATH=/var/lib/fairness-monitor/checkpoint.sqlite \
    FAIRNESS_MONITOR__SERVICE__LOG_FORMAT=json
USER 10001:10001
WORKDIR /var/lib/fairness-monitor
VOLUME ["/var/lib/fairness-monitor"]
EXPOSE 9108
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9108/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["fairness-monitor"]
CMD ["run", "--config", "/etc/fairness-monitor/config.yaml"]
