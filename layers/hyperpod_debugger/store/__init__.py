"""The monitor's DynamoDB tables: the findings and their history (:mod:`.findings`), and the incidents
(:mod:`.incidents`). Adapters like ``aws/``, above the lifecycle whose plans they write."""
