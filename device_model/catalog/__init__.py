"""The catalog: datasheet facts of Trainium devices and EC2 instances, data types, cost-model
constants, topology, and user overrides of all of them."""
