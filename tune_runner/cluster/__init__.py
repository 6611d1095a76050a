"""The Ray a search runs on: a local instance or a joined cluster (session), the watchdog that ends a local Ray
whose driver died (reaper), and searches sent to a cluster as Ray Jobs (jobs)."""
