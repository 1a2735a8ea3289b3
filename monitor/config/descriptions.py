"""What each key of the configuration file does, in a sentence: one table, by schema Struct.

Why here and not in each field's ``Meta``: the schema's modules stay about types and checks,
and this table feeds both the JSON Schema that editors show on hover (``check-config
--schema``) and docs/config.md (``check-config --reference``). ``tests/config/test_reference.py``
fails when a key of the schema has no sentence here (or a sentence names no key).
"""

from __future__ import annotations

KEYS: dict[str, str] = {
    # -- the file ------------------------------------------------------------------------------
    "ConfigDoc.models": "The monitored models, by the model id their events carry.",
    "ConfigDoc.fields": "Where each field lives in the monitor's own JSON events.",
    "ConfigDoc.unknown_models": "An event of a model not configured here: `refuse` dead-letters "
    "it (`unknown_model`); `default` counts it as `default_model`'s (or the only model's).",
    "ConfigDoc.default_model": "The model of events without a model id (and of unknown ones, "
    "with `unknown_models: default`); absent: the only model, if one.",
    "ConfigDoc.confidence": "Level of every confidence interval the monitor reports and of the "
    "`significant` rules' intervals.",
    "ConfigDoc.min_timestamp": "Events timed before this (epoch seconds or ISO-8601) are "
    "dead-lettered (`timestamp_out_of_range`): a zero or a milliseconds-as-seconds mix-up.",
    "ConfigDoc.max_future": "Events timed further than this ahead of their record's Kafka time "
    "(or the clock) are dead-lettered (`timestamp_in_future`).",
    "ConfigDoc.limits": "Size limits on what one record may bring in.",
    "ConfigDoc.kafka": "The Kafka client: brokers, topics, consumer group, TLS and SASL.",
    "ConfigDoc.checkpoint": "Where and how often the counts and offsets are saved.",
    "ConfigDoc.service": "HTTP endpoints, the invalid-record guard, logging and timeouts.",
    "ConfigDoc.alerts": "Alert rules, drift, evidence detectors and where alerts go.",
    # -- a model ---------------------------------------------------------------------------------
    "ModelDoc.attributes": "The protected attributes, by name (each `{}` for a categorical one, "
    "or with `bins`, `values`, `max_groups`, `field`).",
    "ModelDoc.intersections": "Attribute sets measured together, e.g. `[[race, sex]]`: each "
    "combination of values is a group.",
    "ModelDoc.favourable": "The prediction value that is good for the person (1: approve).",
    "ModelDoc.threshold": "With a score: prediction = score ≥ threshold (absent: the event's "
    "prediction).",
    "ModelDoc.prediction_values": "Event prediction values (text) mapped to 0 or 1.",
    "ModelDoc.label_values": "Event label values (text) mapped to 0 or 1.",
    "ModelDoc.windows": "The sliding windows measured: durations, or `{length, lag, name}` for "
    "a window ending `lag` ago.",
    "ModelDoc.bucket": "Width of the time buckets: windows and lags are whole buckets, alerts "
    "are judged at each bucket's end.",
    "ModelDoc.lateness": "How late (behind the newest event time) an event may arrive and "
    "still be counted in every window; the ring keeps this much past the longest window.",
    "ModelDoc.min_samples": "Groups with fewer decisions in a window are shown but not "
    'compared ("insufficient data").',
    "ModelDoc.max_intersection_groups": "Most groups an intersection may have; past it new "
    "combinations count as `__other__`.",
    "ModelDoc.score_bins": "Equal-width bins of [0, 1] for the score distributions "
    "(calibration, score parity).",
    "ModelDoc.label_time": "Count a label with its prediction's bucket (`prediction`, cohorts) "
    "or at its own time, never before its prediction's bucket (`arrival`).",
    "ModelDoc.reference_groups": "Per attribute set, the group others are compared with "
    "(absent: the group with the highest selection rate; the evidence detectors: the group "
    "with the most decisions). Naming another group and restarting starts that model's "
    "evidence detectors afresh, resolving their firing alerts with a note.",
    "ModelDoc.join": "Bounds of the delayed-label join.",
    "ModelDoc.input": "A serving stack's traffic instead of the monitor's own events: `format`, "
    "the score or prediction tensor, the attributes (docs/serving.md).",
    "AttributeDoc.field": "Dotted path of the attribute in an event (absent: "
    "`<fields.attributes>.<name>`).",
    "AttributeDoc.bins": "Numeric attribute: bin edges, e.g. `[25, 45]` gives `<25`, `25-45`, "
    "`>=45`.",
    "AttributeDoc.max_groups": "Most distinct values kept; past it values count as `__other__`.",
    "AttributeDoc.values": "The groups expected: any other value counts as `__other__`.",
    "WindowDoc.length": "How long the window is.",
    "WindowDoc.lag": "How long before now it ends (a cohort whose labels have come in).",
    "WindowDoc.name": "Its name in metrics and alerts (absent: the length, e.g. `7d_lag30d`).",
    "JoinDoc.ttl": "How long a prediction is kept to meet its label (and to know a repeat); "
    "a label after that is an orphan.",
    "JoinDoc.max_pending": "Most predictions waiting for a label per partition; past it the "
    "oldest are let go, counted.",
    "JoinDoc.early_label_grace": "How long a label that came before its prediction is kept for it.",
    "JoinDoc.max_early_labels": "Most early labels kept per partition; past it the oldest are "
    "let go, counted.",
    **{
        f"FieldsDoc.{name}": f"Dotted path in an event of the {what}."
        for name, what in (
            ("prediction_id", "decision's id (labels name it)"),
            ("model_id", "model id"),
            ("timestamp", "event time (epoch seconds or ISO-8601)"),
            ("prediction", "prediction"),
            ("score", "score, in [0, 1]"),
            ("label", "label (on label events)"),
            ("attributes", "object holding the protected attributes"),
        )
    },
    # -- limits, Kafka, checkpoints, service -----------------------------------------------------
    "LimitsDoc.max_record_bytes": "A record larger than this is dead-lettered "
    "(`record_too_large`).",
    "LimitsDoc.max_id_length": "An id longer than this is dead-lettered (`id_too_long`).",
    "LimitsDoc.max_value_length": "An attribute value longer than this is counted under a "
    "stable shortened name (its start, `~`, a hash).",
    "LimitsDoc.max_rows_per_record": "A serving-stack call with more rows is dead-lettered "
    "(`too_many_rows`).",
    "KafkaDoc.bootstrap_servers": "Brokers, `host:port` (one, or a list).",
    "KafkaDoc.client_id": "The Kafka client id (broker logs and quotas).",
    "KafkaDoc.group_id": "The consumer group: replicas with the same one share the partitions.",
    "KafkaDoc.predictions_topic": "Prediction events (or a serving stack's requests).",
    "KafkaDoc.labels_topic": "Label events, keyed and partitioned like the predictions.",
    "KafkaDoc.responses_topic": "A serving stack's responses, when on a topic of their own.",
    "KafkaDoc.attributes_topic": "Protected attributes by decision id, when they are not "
    "model inputs.",
    "KafkaDoc.dead_letter_topic": "Where malformed records go, with their reason in headers "
    "(absent: counted and logged only).",
    "KafkaDoc.security_protocol": "How the client talks to the brokers.",
    "KafkaDoc.sasl_mechanism": "The SASL mechanism, with a `SASL_*` protocol.",
    "KafkaDoc.sasl_username": "SASL user name, written here (or use the `_env` / `_file` key).",
    "KafkaDoc.sasl_username_env": "Environment variable holding the SASL user name.",
    "KafkaDoc.sasl_username_file": "File holding the SASL user name (a mounted secret).",
    "KafkaDoc.sasl_password": "SASL password, written here: prefer the `_env` or `_file` key.",
    "KafkaDoc.sasl_password_env": "Environment variable holding the SASL password.",
    "KafkaDoc.sasl_password_file": "File holding the SASL password (a mounted secret).",
    "KafkaDoc.ssl_cafile": "CA certificates to trust for the brokers (PEM file).",
    "KafkaDoc.ssl_certfile": "The client's certificate, for mutual TLS (PEM file).",
    "KafkaDoc.ssl_keyfile": "The client certificate's private key (PEM file).",
    "KafkaDoc.max_poll_records": "Most records one poll returns (one decoded batch).",
    "KafkaDoc.auto_offset_reset": "Where a partition without a checkpoint starts reading.",
    "KafkaDoc.session_timeout_ms": "Consumer group session timeout: a replica silent this long "
    "loses its partitions.",
    "KafkaDoc.idle_partition_timeout": "A partition read to its end without decisions this "
    "long stops holding back alert evaluation (0: never).",
    "CheckpointDoc.path": "The SQLite checkpoint file (`store: sqlite`).",
    "CheckpointDoc.interval": "Save at least this often.",
    "CheckpointDoc.every_events": "Save also after this many events.",
    "CheckpointDoc.on_corrupt": "A checkpoint that cannot be read: `refuse` to start, or "
    "start `fresh` (the bad one moved aside).",
    "CheckpointDoc.store": "`sqlite`: one file, one instance; `kafka`: a compacted topic any "
    "replica restores from (scale-out).",
    "CheckpointDoc.state_topic": "The compacted state topic (`store: kafka`; default "
    "`fairness-monitor-state`).",
    "CheckpointDoc.state_topic_partitions": "Its partitions, when the monitor creates it "
    "(default 1).",
    "CheckpointDoc.state_topic_replication": "Its replication factor, when the monitor "
    "creates it (default -1: the broker's).",
    "CheckpointDoc.state_chunk_bytes": "Bytes of state per record (default 512 KiB).",
    "CheckpointDoc.state_transactions": "Write each save as one Kafka transaction (default false).",
    "CheckpointDoc.state_segment_bytes": "The state topic's `segment.bytes` (default 16 MiB).",
    "ServiceDoc.listen": "Where the HTTP endpoints listen (`/metrics`, status page, probes).",
    "ServiceDoc.http_host": "Interface to listen on (default 0.0.0.0), instead of `listen`.",
    "ServiceDoc.http_port": "Port to listen on (default 9108), instead of `listen`.",
    "ServiceDoc.web_config_file": "TLS and basic auth for the endpoints (exporter-toolkit "
    "web config).",
    "ServiceDoc.http_workers": "Threads answering HTTP requests.",
    "ServiceDoc.http_timeout": "Time for a TLS handshake and request head, and for writing "
    "an answer.",
    "ServiceDoc.http_idle_timeout": "How long a kept-alive connection may wait for a request.",
    "ServiceDoc.http_max_connections": "Most open connections; one more closes the oldest "
    "idle one (a flood cannot lock out a scrape).",
    "ServiceDoc.probe_listen": "A second, plain listener serving only `/healthz` and "
    "`/readyz` (probes, when the main one needs auth).",
    "ServiceDoc.max_invalid_ratio": "Stop (exit 3) when more than this share of a "
    "partition's recent records is invalid: a wrong topic or mapping.",
    "ServiceDoc.invalid_ratio_min_events": "Recent records per partition the invalid ratio "
    "is judged over.",
    "ServiceDoc.log_format": "`text` lines, or one JSON object per line.",
    "ServiceDoc.log_level": "Least severe log level written.",
    "ServiceDoc.liveness_timeout": "`/healthz` fails when the main loop has not run for this long.",
    "ServiceDoc.shutdown_timeout": "On stop, how long the alert sinks get to deliver what is "
    "pending (keep under the pod's grace period).",
    # -- alerts ----------------------------------------------------------------------------------
    "AlertsDoc.rules": "Fixed-window alert rules (absent: FourFifthsRule, EqualizedOddsGap, "
    "TPR and FPR gaps; `[]`: none).",
    "AlertsDoc.drift": "Fairness-drift detection on hourly values (FairnessDrift).",
    "AlertsDoc.sinks": "Where alerts are sent.",
    "AlertsDoc.false_page_budget": "How many false pages a fair model may cause, per model: "
    "sets the evidence detectors' thresholds.",
    "AlertsDoc.evidence": "The anytime-valid evidence detectors (FairnessChange, "
    "FourFifthsEvidence, EqualizedOddsEvidence).",
    "AlertsDoc.scope": "`local`: each replica judges its own partitions; `global`: one replica "
    "judges all of them (needs `checkpoint.store: kafka`).",
    "AlertsDoc.partials_topic": "The topic replicas publish their partitions' counts on "
    "(`scope: global`).",
    "RuleDoc.name": "The alert's name (`alertname`).",
    "RuleDoc.metric": "The disparity the rule watches.",
    "RuleDoc.bound": "The value it must not cross, e.g. 0.8.",
    "RuleDoc.op": "`<`: fire below the bound; `>`: above it.",
    "RuleDoc.min_samples": "Each compared group needs this many decisions (or labelled "
    "outcomes) in the window; above the model's, the rule compares only the groups that "
    "reach it (the generated Prometheus rules do not: `prometheus-rules` warns).",
    "RuleDoc.significant": "Fire only when the whole confidence interval is beyond the bound "
    "(and resolve on it too).",
    "RuleDoc.for": "How long (event time) the condition must hold before the alert fires.",
    "RuleDoc.hysteresis": "How far back past the bound the value must come to resolve.",
    "RuleDoc.severity": "The `severity` label: `page`, `ticket`, or your own.",
    "RuleDoc.runbook_url": "Link sent with the alert (`runbook_url` annotation).",
    "RuleDoc.windows": "Only these windows (absent or empty: all).",
    "RuleDoc.attributes": "Only these attribute sets (absent or empty: all).",
    "DriftDoc.enabled": "Run the drift detectors.",
    "DriftDoc.detector": "river's change detector.",
    "DriftDoc.metrics": "The disparities watched for drift.",
    "DriftDoc.bucket": "One value per this much event time is fed to each detector.",
    "DriftDoc.min_samples": (
        "A value compares the groups with this many decisions (or labelled outcomes) in its "
        "hour; the model's `min_samples` where that is larger."
    ),
    "DriftDoc.threshold": "Page-Hinkley's λ, in baseline standard deviations.",
    "DriftDoc.delta": "Page-Hinkley's tolerance per value, in baseline standard deviations.",
    "DriftDoc.min_values": "Values that set the baseline before detection starts.",
    "DriftDoc.severity": "The drift alert's `severity` label.",
    "DriftDoc.label_settle": "How long labels take to be complete enough: TPR/FPR drift reads "
    "cohorts that old (absent: the largest window lag).",
    "SinkDoc.alertmanager_url": "Alertmanager's base URL (API v2).",
    "SinkDoc.webhook_url": "A URL that gets each transition as JSON.",
    "SinkDoc.kafka_topic": "A topic that gets each transition as JSON.",
    "SinkDoc.log": "Log each transition.",
    "SinkDoc.resend_interval": "Alertmanager gets every active alert again this often; failed "
    "pages are retried within it.",
    "SinkDoc.timeout": "Seconds for a whole request to a receiver.",
    "SinkDoc.max_retries": "Failures in a row before a page waits behind the others.",
    "BudgetDoc.pages": "False pages accepted from a fair model...",
    "BudgetDoc.per": "...over this long.",
    "EvidenceDoc.enabled": "Run the evidence detectors.",
    "EvidenceDoc.baseline": "A group's baseline: its counts over this long...",
    "EvidenceDoc.guard": "...ending this long ago (a fresh change stays out of it).",
    "EvidenceDoc.min_baseline": "Decisions (or labelled outcomes) a baseline needs before "
    "detection starts.",
    "EvidenceDoc.resolve_odds": "Evidence of recovery (odds) that resolves an alert.",
    "EvidenceDoc.baseline_z": "A change is judged from the far end of the baseline ± this "
    "many standard errors.",
    "EvidenceDoc.margin": "Nats above the threshold the evidence is capped at while firing "
    "(how fast recovery can show).",
    "EvidenceDoc.severity": "The evidence alerts' `severity` label.",
}
