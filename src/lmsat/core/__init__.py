"""Building blocks every layer uses: plan types, path names, schedules, records, checksums, fingerprints, retries."""
