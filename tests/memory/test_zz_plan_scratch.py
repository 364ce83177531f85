from django.db import connection
from django_tenants.utils import schema_context
from memory.models import Memory
from memory.selectors import live_memories
from pgvector.django import CosineDistance
import numpy as np

def test_plan(acme):
    with schema_context(acme.schema):
        with connection.cursor() as c:
            c.execute("""
              INSERT INTO memory_memory (user_id, content, kind, embedding, embedder, metadata, source_request_id, source_turn, strength, created_at, updated_at)
              SELECT 'user' || (g % 2000), 'memory ' || g, 'fact',
                     (SELECT array_agg(random()-0.5)::vector FROM generate_series(1,384) WHERE g > 0),
                     'x', '{}', '', '', 1.0, now(), now()
              FROM generate_series(1, 100000) g
            """)
            c.execute("UPDATE memory_memory SET search_vector = to_tsvector('english', content)")
            c.execute("ANALYZE memory_memory")
        v = np.random.randn(384); v = (v/np.linalg.norm(v)).tolist()
        qs = (live_memories("user7").annotate(distance=CosineDistance("embedding", v)).order_by("distance", "id").values("id", "distance")[:20])
        print(qs.explain(analyze=True))
        qs2 = (live_memories("user7").annotate(distance=CosineDistance("embedding", v)).order_by("distance").values("id", "distance")[:20])
        print(qs2.explain(analyze=True))
        from memory.selectors import search_memories
        import time
        t=time.perf_counter()
        for _ in range(20):
            search_memories(user_id="user7", query="memory 7", vector=v, limit=5, min_similarity=-1, hybrid=True)
        print("hybrid ms", (time.perf_counter()-t)/20*1000)
        t=time.perf_counter()
        for _ in range(20):
            search_memories(user_id="user7", query="memory 7", vector=v, limit=5, min_similarity=-1)
        print("emb ms", (time.perf_counter()-t)/20*1000)
