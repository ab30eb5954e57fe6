"""What every chart of the HTML report shares: times on its axes and its layout (charts.py,
charts_txn.py, charts_loss.py)."""

from __future__ import annotations

from datetime import datetime, timezone


def iso_time(ms):
    """An axis time; None for an unknown time or Kafka's -1 (no timestamp), never 1969."""
    return None if ms is None or ms < 0 else datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat()


def layout(fig, title: str, height: int = 420) -> None:
    # the legend below the last x axis's tick labels and title (pixels as a fraction of the plot)
    height += 60
    plot = max(height - 60 - 110, 100)
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=height, margin={"l": 60, "r": 20, "t": 60, "b": 110},
                      legend={"orientation": "h", "y": -70 / plot, "yanchor": "top"}, template="plotly_white")
