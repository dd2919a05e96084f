"""Many faults on a seeded schedule against real `serve` processes, and a checker that compares
the end with the simulated platform's truth (`python -m bench.faults --seed 7 --minutes 30`).

schedule.py draws the faults from the seed; platform.py is the simulated platform with the
route's faults switched on and off by the schedule; fleet.py the `serve` processes, their state
dirs, small disks and shards; scrapers.py the scrapers that watch for a counter going
backwards; checker.py the comparison with the truth; run.py puts them together.
"""
