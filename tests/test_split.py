"""The split of a step's lanes over threads, and the measuring that decides whether it runs."""

from conftest import corpus, needs_split, rewrite_header
from dyncompress import compress, decompress
from dyncompress.coding import split


class Clock:
    """A clock the test moves: each segment takes the seconds the test says its way takes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(chooser: split.Chooser, clock: Clock, seconds_per_step, segments: int, steps: int = 32) -> list[tuple]:
    """Code `segments` segments of `steps` steps through `chooser`, each way taking
    `seconds_per_step(way, i)`; the ways it chose, in order."""
    chosen = []
    for i in range(segments):
        way = chooser.way
        chosen.append(way)
        began = clock()
        clock.now += steps * seconds_per_step(way, i)
        chooser.measured(steps, clock() - began)
    return chosen


def test_alone_the_threads_are_kept_and_one_thread_is_tried_less_and_less_often():
    clock = Clock()
    chooser = split.Chooser(2, 2, window_s=0.01, max_wait=16, clock=clock)
    # two threads 1.4 times as fast as one: 0.5 ms a step against 0.7
    chosen = run(chooser, clock, lambda way, i: 0.0005 if way == (2, 2) else 0.0007, 2000)
    assert chosen[0] == (2, 2)
    alone = chosen.count((1, 1))
    assert 0 < alone < 0.1 * len(chosen)  # tried, not kept
    assert chosen[-340:].count((1, 1)) <= 2 * 340 // 34  # one window in seventeen, at the end


def test_beside_busy_work_one_thread_takes_over_and_the_threads_are_tried_rarely():
    clock = Clock()
    chooser = split.Chooser(2, 2, window_s=0.01, max_wait=64, clock=clock)
    # the threads wait for each other while one is descheduled: four times as slow as one thread
    chosen = run(chooser, clock, lambda way, i: 0.002 if way == (2, 2) else 0.0005, 4000)
    threads = [w == (2, 2) for w in chosen]
    assert threads[:8] == [True] * 8 and threads[8:10] == [False, False]  # one thread tried at the fifth window
    assert sum(threads[:40]) < 15  # and kept
    assert sum(threads) < 0.05 * len(threads)


def test_when_other_work_starts_midway_the_chooser_moves_to_one_thread_soon():
    clock = Clock()
    chooser = split.Chooser(2, 2, window_s=0.01, max_wait=64, clock=clock)

    def speed(way, i):  # alone for 2,000 segments, then a busy process
        if i < 2000:
            return 0.0005 if way == (2, 2) else 0.0007
        return 0.003 if way == (2, 2) else 0.0007

    chosen = run(chooser, clock, speed, 3000)
    assert chosen[1990] == (2, 2) or chosen[1995] == (2, 2)  # the threads while alone
    assert chosen[2020:].count((2, 2)) < 0.05 * 980  # one thread soon after the busy work started


def test_with_one_thread_nothing_is_measured():
    chooser = split.Chooser(1, 1)
    assert chooser.ways == ((1, 1),)
    for _ in range(100):
        chooser.measured(32, 1.0)
    assert chooser.way == (1, 1) and chooser.speed == [None]


class Alternating(split.Chooser):
    """Threads and one thread in turn, segment by segment: the most switching a coding can see."""

    def measured(self, steps: int, seconds: float) -> None:
        if len(self.ways) > 1:
            self.trying = 1 - self.trying


def test_switching_between_threads_and_one_thread_changes_no_bit(monkeypatch):
    needs_split()
    data = corpus("alice29.txt")[:12000]
    one = compress(data, threads=1, lanes=4, segment_len=8)
    monkeypatch.setattr(split, "Chooser", Alternating)
    switching = compress(data, threads=2, lanes=4, segment_len=8)
    # the headers differ in the recorded thread count only
    assert rewrite_header(switching, lambda meta: meta["settings"].update(threads=1)) == one
    assert decompress(switching) == data
