"""What an archive shows people: the HTML report (`html.py`) and dataset exports (`datasets.py`)."""
