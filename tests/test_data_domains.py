"""The data package's domains share only data-level modules: none imports another's."""
import test_imports

DOMAINS = ("docent_jax.data.kg", "docent_jax.data.reviews", "docent_jax.data.offers", "docent_jax.data.universal")


def test_no_domain_imports_another():
  graph = test_imports.import_graph()
  wrong = sorted((module, target) for module, targets in graph.items() for target in targets
                 for domain in DOMAINS if module.startswith(domain) and target.startswith(DOMAINS)
                 and not target.startswith(domain))
  assert not wrong
  assert all(any(module.startswith(domain) for module in graph) for domain in DOMAINS)
