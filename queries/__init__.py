"""The named SQL queries (``*.sql``), shipped with steptrace as package data."""
