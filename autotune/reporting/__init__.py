"""Comparisons of strategies, the 2023 paper's metric, Markdown/HTML reports and plots."""
