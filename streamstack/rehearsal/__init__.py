"""The cluster rehearsal: catalogue jobs run the way the cluster runs them, on one machine."""
