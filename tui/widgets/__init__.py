"""neuron-top widgets: pure functions of the view data they are given (attributes down, messages up)."""
