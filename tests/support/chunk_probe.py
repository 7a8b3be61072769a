"""Where the chunk stage's time goes: the product's chunk transform over a documents Delta table,
written as Delta, with machine counters (CPU by kind, disk bytes, dirty pages) sampled
throughout and Spark's per-stage task metrics (GC, spill, run/CPU time) read from its REST API.

Used on the 1M scale run's documents table and a 10% sample of it, to find why chunk's seconds per
document at 1M were 1.83x those at 100k (README, Scaling; scale.json, chunk_linearity_check):

  python -m tests.support.chunk_probe sample SRC_DOCS DST_DOCS 10   # every 10th document (doc_id hash)
  python -m tests.support.chunk_probe run DOCS OUT RESULT.json      # timed chunk, then a timed sync
"""
import json
import os
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spark_session(ui=True):
    from corpusgraph.config import SparkSection
    from corpusgraph.runner.spark import build_spark

    sec = SparkSection(master="local[2]", driver_memory="6g", shuffle_partitions=20,
                       jars_dir=os.path.join(REPO, "jars"),
                       extra={"spark.ui.enabled": "true" if ui else "false"})
    s = build_spark(sec, local_dirs=os.path.join(os.path.dirname(os.path.abspath(sys.argv[3])), "spark-local"))
    s.sparkContext.setLogLevel("ERROR")
    return s


def cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return dict(zip(["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"], [x / hz for x in v]))


DISK = os.environ.get("CORPUSGRAPH_PROBE_DISK", "vda")  # the block device the warehouse is on


def disk():
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == DISK:
                return {"read_mb": int(p[5]) * 512 / 2**20, "written_mb": int(p[9]) * 512 / 2**20,
                        "io_ms": int(p[12])}
    return {"read_mb": 0.0, "written_mb": 0.0, "io_ms": 0}


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            if k in ("Dirty", "Writeback", "Cached", "MemFree"):
                out[k] = int(v.split()[0]) / 1024
    return out


def diff(a, b):
    return {k: round(b[k] - a[k], 1) for k in a}


def main():
    mode = sys.argv[1]
    spark = spark_session(ui=(mode == "run"))
    if mode == "sample":
        from pyspark.sql import functions as F
        src, dst, every = sys.argv[2], sys.argv[3], int(sys.argv[4])
        df = spark.read.format("delta").load(src)
        df.where(F.abs(F.hash("doc_id")) % every == 0).write.format("delta").mode("overwrite").save(dst)
        print("sampled", spark.read.format("delta").load(dst).count())
        return
    from corpusgraph.config import ChunkSection
    from corpusgraph.stages.chunk import chunk_documents

    docs, out, result = sys.argv[2], sys.argv[3], sys.argv[4]
    documents = spark.read.format("delta").load(docs)
    n = documents.count()
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.wait(5):
            samples.append({"t": time.time(), **meminfo(), **disk()})

    th = threading.Thread(target=sample, daemon=True)
    c0, d0, t0 = cpu(), disk(), time.time()
    th.start()
    units = chunk_documents(documents, ChunkSection(size_tokens=300, overlap_tokens=40))
    units.write.format("delta").mode("overwrite").save(out)
    t1, c1, d1 = time.time(), cpu(), disk()
    os.sync()
    t2, c2, d2 = time.time(), cpu(), disk()
    stop.set()
    app = json.load(urllib.request.urlopen("http://localhost:4040/api/v1/applications"))[0]["id"]
    stages = json.load(urllib.request.urlopen(f"http://localhost:4040/api/v1/applications/{app}/stages"))
    keys = ["numTasks", "executorRunTime", "executorCpuTime", "jvmGcTime", "memoryBytesSpilled",
            "diskBytesSpilled", "inputBytes", "outputBytes", "shuffleWriteBytes", "shuffleReadBytes",
            "executorDeserializeTime", "resultSerializationTime"]
    st = [{"stageId": s["stageId"], "name": s["name"][:60], **{k: s.get(k) for k in keys}} for s in stages]
    rec = {"documents": n, "units": spark.read.format("delta").load(out).count(),
           "write_s": round(t1 - t0, 1), "sync_s": round(t2 - t1, 1),
           "cpu_during_write": diff(c0, c1), "cpu_during_sync": diff(c1, c2),
           "disk_during_write": diff(d0, d1), "disk_during_sync": diff(d1, d2),
           "dirty_max_mb": max((s["Dirty"] for s in samples), default=None),
           "stages": st, "samples": samples}
    json.dump(rec, open(result, "w"), indent=1)
    print(json.dumps({k: v for k, v in rec.items() if k not in ("samples", "stages")}, indent=1))
    for s in st:
        print(s)


if __name__ == "__main__":
    main()
