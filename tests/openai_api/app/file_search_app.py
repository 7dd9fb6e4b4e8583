"""An app written for OpenAI, as OpenAI's file search guide writes it: nothing in it knows about ragengine.

It reads its endpoint and key the way every OpenAI SDK app does (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``),
so moving it to the engine changes the base URL and nothing else. ``test_unmodified_app.py`` runs it as
is against a real engine; it prints what it got as JSON.
"""

import json
import sys

from openai import OpenAI

client = OpenAI()

vector_store = client.vector_stores.create(name="Knowledge Base")
with open(sys.argv[1], "rb") as handbook, open(sys.argv[2], "rb") as menu:
    batch = client.vector_stores.file_batches.upload_and_poll(vector_store_id=vector_store.id, files=[handbook, menu])

results = client.vector_stores.search(vector_store_id=vector_store.id, query="What is KAITO?", max_num_results=1)

response = client.responses.create(
    model="gpt-4.1",
    input="What is KAITO?",
    tools=[{"type": "file_search", "vector_store_ids": [vector_store.id]}],
    include=["file_search_call.results"],
)
annotations = response.output[1].content[0].annotations
follow_up = client.responses.create(model="gpt-4.1", input="Thanks. Anything else?", previous_response_id=response.id)

print(json.dumps({
    "batch": [batch.status, batch.file_counts.completed],
    "top_hit": results.data[0].filename,
    "answer": response.output_text,
    "cited": sorted({a.filename for a in annotations if a.type == "file_citation"}),
    "hits": [r.filename for r in response.output[0].results],
    "follow_up": follow_up.previous_response_id == response.id,
}))
