"""From config files to a plan: validation, the run claim, model entries, refusals, discovery, slicing, staging."""
