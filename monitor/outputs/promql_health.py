"""Rules of the generated Prometheus file that are not computed from the metric registry,
appended verbatim: the selective-labels warning and the monitor's own health alerts.

They read operational families (``fairness_consumer_lag``, ``fairness_checkpoint_failing``…)
whose thresholds are starting points to tune to the model's traffic; promtool unit tests in
``deploy/prometheus/fairness-rules.test.yml`` pin each of them.
"""

from __future__ import annotations

# Selective labels: outcomes arrive for one predicted class only (a loan never granted is never
# repaid). TPR and FPR are then 1 or 0 by construction and their gap alerts cannot fire: say so
# instead of staying silent.
SELECTIVE_LABELS = """\
- alert: FairnessLabelsSelective
  expr: |
    max by (model, window) (
      (
        sum by (model, window, attribute) (fairness_true_negatives + fairness_false_negatives) == 0
        and sum by (model, window, attribute) (fairness_true_positives + fairness_false_positives) >= 30
      )
      or
      (
        sum by (model, window, attribute) (fairness_true_positives + fairness_false_positives) == 0
        and sum by (model, window, attribute) (fairness_true_negatives + fairness_false_negatives) >= 30
      )
    )
  for: 1h
  labels:
    severity: ticket
  annotations:
    summary: "Labels arrive for one predicted class only ({{ $labels.model }}, window {{ $labels.window }}): TPR/FPR gaps are blind"
    description: "Every labelled prediction in the window has the same predicted class, so TPR and FPR are 0 or 1 by construction and the equalized-odds alerts cannot fire. Error-rate fairness needs outcomes for both classes (a holdout, bureau data, later review)."
    runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnesslabelsselective"
"""

# The monitor's own health: it cannot page about its own silence.
HEALTH_GROUP = """\
- name: fairness-monitor-health
  rules:
    - alert: FairnessAlertDeliveryFailing
      expr: sum by (instance, sink) (increase(fairness_alert_delivery_failures_total[10m])) > 0
      for: 5m
      labels:
        severity: page
      annotations:
        summary: "Fairness alerts are not reaching the {{ $labels.sink }} sink ({{ $labels.instance }})"
        description: "Delivery attempts failed in the last 10 minutes (the monitor retries with backoff). Alerts the monitor raises may not be seen."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessalertdeliveryfailing"
    - alert: FairnessAlertPagesUndelivered
      expr: sum by (instance, sink, reason) (increase(fairness_alert_pages_undelivered_total[15m])) > 0
      labels:
        severity: page
      annotations:
        summary: "{{ $value }} fairness alert notification(s) to {{ $labels.sink }} will never be delivered ({{ $labels.reason }}, {{ $labels.instance }})"
        description: "The monitor dropped notifications (queue or outbox full) or the receiver rejected them for good (4xx). Read the firing alerts on the status page or in Alertmanager."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessalertpagesundelivered"
    - alert: FairnessMonitorCheckpointFailing
      expr: max by (instance) (fairness_checkpoint_failing) > 0
      for: 5m
      labels:
        severity: page
      annotations:
        summary: "{{ $labels.instance }} cannot write its checkpoint ({{ $value }} failed attempts in a row)"
        description: "The volume is full, read-only or failing. The monitor keeps its state in memory and pauses consumption after 3 failed attempts; /readyz says why."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessmonitorcheckpointfailing"
    - alert: FairnessDeadLettersRefused
      expr: sum by (instance) (increase(fairness_dead_letters_total{outcome="failed"}[15m])) > 0
      labels:
        severity: ticket
      annotations:
        summary: "The dead-letter topic refused {{ $value }} record(s) ({{ $labels.instance }})"
        description: "Invalid records that should be on the dead-letter topic are not: only the monitor's count and log say they existed."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessdeadlettersrefused"
    - alert: FairnessMonitorDeadLetters
      expr: |
        sum by (instance, topic) (rate(fairness_events_total{outcome="invalid"}[15m]))
        / sum by (instance, topic) (rate(fairness_events_total{outcome=~"ok|invalid"}[15m]))
        > 0.01
      for: 15m
      labels:
        severity: ticket
      annotations:
        summary: "{{ $value | humanizePercentage }} of the records on {{ $labels.topic }} are dead-lettered ({{ $labels.instance }})"
        description: "Invalid records go to the dead-letter topic with their reason in the fm.reason header; they are not counted in any fairness metric."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessmonitordeadletters"
    - alert: FairnessMonitorFallingBehind
      expr: |
        sum by (instance) (fairness_consumer_lag) > 10000
        and sum by (instance) (delta(fairness_consumer_lag[30m])) > 0
      for: 30m
      labels:
        severity: ticket
      annotations:
        summary: "{{ $labels.instance }} is {{ $value }} records behind and falling further behind"
        description: "Consumer lag above 10,000 records has grown for 30 minutes: fairness metrics and alerts describe the past."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessmonitorfallingbehind"
    - alert: FairnessMonitorStalled
      expr: |
        sum by (instance) (fairness_consumer_lag) > 0
        and sum by (instance) (rate(fairness_events_total{outcome=~"ok|invalid"}[10m])) == 0
      for: 10m
      labels:
        severity: page
      annotations:
        summary: "{{ $labels.instance }} has {{ $value }} records waiting and has consumed none for over 10 minutes"
        description: "The process is up (it is scraped) but its main loop does not consume: no fairness metric or alert moves."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessmonitorstalled"
    - alert: FairnessMonitorAbsent
      expr: absent_over_time(fairness_events_total[10m])
      labels:
        severity: page
      annotations:
        summary: "No fairness monitor has been scraped for 10 minutes: nothing is judged"
        description: "Without counts no fairness alert can fire, and after an hour without any a firing one resolves: that resolution is the outage, not a recovery."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessmonitorabsent"
    - alert: FairnessAttributeCoverageLow
      expr: |
        sum by (instance, model) (increase(fairness_attribute_decisions_total{outcome="with_attributes"}[30m]))
        / sum by (instance, model) (increase(fairness_attribute_decisions_total[30m]))
        < 0.95
      for: 30m
      labels:
        severity: ticket
      annotations:
        summary: "Only {{ $value | humanizePercentage }} of {{ $labels.model }}'s decisions got their protected attributes from the attributes topic ({{ $labels.instance }})"
        description: "The rest are counted in the __missing__ groups: every group's rates and the disparities describe fewer decisions than were made. The attributes producer is late, down, or keys its records differently from the requests."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessattributecoveragelow"
    - alert: FairnessAttributesNotArriving
      expr: |
        sum by (instance, model) (fairness_attribute_decisions_waiting) > 0
        and sum by (instance, model) (increase(fairness_attribute_decisions_total[30m])) == 0
      for: 15m
      labels:
        severity: page
      annotations:
        summary: "{{ $value }} decisions of {{ $labels.model }} wait for their protected attributes and none has been counted for 45 minutes ({{ $labels.instance }})"
        description: "No attribute record has met a decision, and the attributes topic's clock has not moved past any decision's attributes_ttl: the attributes producer is down or writes elsewhere. Until it resumes, these decisions are in no fairness metric and no alert can fire."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessattributesnotarriving"
    - alert: FairnessPredictionIdsShared
      expr: sum by (instance) (increase(fairness_events_total{outcome="shared_id"}[1h])) > 0
      labels:
        severity: ticket
      annotations:
        summary: "{{ $value }} predictions in the last hour carried the id of another model's prediction ({{ $labels.instance }})"
        description: "Labels name a decision by its id alone, so two models' predictions with one id cannot both be joined: the later one is not counted, and that model is judged on fewer decisions or none (a champion and a challenger scoring the same request). Give each model's predictions ids of their own (prefix them with the model) and publish a label per id."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnesspredictionidsshared"
    - alert: FairnessGroupsOverflowing
      expr: sum by (instance, model, attribute) (increase(fairness_group_overflow_total[1h])) > 0
      labels:
        severity: ticket
      annotations:
        summary: "{{ $value }} decisions of {{ $labels.model }} had a new value of {{ $labels.attribute }} past its max_groups in the last hour ({{ $labels.instance }})"
        description: "Every place of the attribute is taken, so new values are counted as __other__: those groups have no rates, no disparities and no alerts of their own. Raise max_groups, or declare the attribute's values so that odd values cannot take places."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessgroupsoverflowing"
    - alert: FairnessAlertWindowsSkipped
      expr: sum by (instance, model) (increase(fairness_alert_windows_skipped_total[1h])) > 0
      labels:
        severity: ticket
      annotations:
        summary: "{{ $value }} windows of {{ $labels.model }} were not judged in the last hour: their counts had left the ring ({{ $labels.instance }})"
        description: "Alert evaluation fell behind the data by more than the model's lateness (a catch-up after a restart or an outage, a partition far ahead of another): those windows were skipped rather than judged on truncated counts, so no alert could fire for them."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessalertwindowsskipped"
    - alert: FairnessAlertPartialsIncomplete
      expr: sum by (instance, outcome) (increase(fairness_alert_partials_total{outcome=~"missing|let_go|too_large"}[1h])) > 0
      labels:
        severity: ticket
      annotations:
        summary: "{{ $value }} partials were {{ $labels.outcome }} in the last hour ({{ $labels.instance }}, alerts.scope: global)"
        description: "missing: a boundary was judged without one partition's counts; let_go: a partition's partials waited too long and its windows were skipped; too_large: a partition's counts were left out (over the producer's request size). The global alerts of those boundaries saw fewer decisions than were made."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessalertpartialsincomplete"
    - alert: FairnessAlertEvaluationBehind
      expr: max by (instance, model) (fairness_alert_evaluation_behind_seconds) > 3600
      for: 15m
      labels:
        severity: ticket
      annotations:
        summary: "Fairness alerts for {{ $labels.model }} are judged {{ $value | humanizeDuration }} behind the newest data ({{ $labels.instance }})"
        description: "Alert rules wait for every partition's labels to reach a bucket boundary (at most the model's lateness): a lagging label topic, or labels stamped with old times, delays every alert."
        runbook_url: "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md#fairnessalertevaluationbehind"
"""
