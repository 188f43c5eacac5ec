// Linked with one layer's whole archive and only the layers it may use: the link fails if the
// layer calls into any other.
int main() { return 0; }
