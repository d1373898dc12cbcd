"""Is a model saturating (section 3): the paired verdict, the scaling-law shortfall, downstream lm-eval tasks."""
