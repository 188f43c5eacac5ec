int mlp_demo_placeholder;
