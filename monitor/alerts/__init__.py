"""Alerts: rules as data, a pending → firing → resolved lifecycle, fairness drift, sinks."""
