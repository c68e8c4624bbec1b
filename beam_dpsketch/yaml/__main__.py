"""``python -m beam_dpsketch.yaml``: print the path of the provider list to include."""

from beam_dpsketch.yaml import PROVIDERS_FILE

print(PROVIDERS_FILE)
