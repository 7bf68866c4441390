/* The emulated cluster's own check (cluster_test.sh selftest): every rank
 * prints its hostname, the ranks agree on a sum (MPI works across the
 * nodes), and rank 0 times a transfer to the first rank on another host
 * (the link's rate, shaped by tc).
 *
 *   cluster_probe [MIB]    MIB: the transfer size in MiB (default 32)
 *
 * Output, one line per rank then rank 0's summary:
 *   rank R host H
 *   sum S hosts N
 *   transfer B bytes to rank P in T s: G Gbit/s
 *   round trip to rank P: U us               (1-byte messages, mean of 1000)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long mib = argc > 1 ? atol(argv[1]) : 32;

  char host[64] = {0};  // this rank's hostname, NUL-padded
  gethostname(host, sizeof host - 1);
  printf("rank %d host %s\n", rank, host);
  fflush(stdout);

  char *hosts = malloc((size_t)size * sizeof host);  // (size, 64) hostnames
  MPI_Allgather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, MPI_COMM_WORLD);
  int distinct = 0, peer = -1;
  for (int r = 0; r < size; r++) {
    int seen = 0;
    for (int q = 0; q < r; q++) seen |= strcmp(hosts + q * sizeof host, hosts + r * sizeof host) == 0;
    distinct += !seen;
    if (peer < 0 && strcmp(hosts + r * sizeof host, host) != 0) peer = r;
  }
  MPI_Bcast(&peer, 1, MPI_INT, 0, MPI_COMM_WORLD);

  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("sum %ld hosts %d\n", sum, distinct);

  if (peer > 0 && (rank == 0 || rank == peer)) {
    size_t bytes = (size_t)mib << 20;
    char *buf = calloc(bytes, 1);
    char ack = 0;
    // One warm-up message opens the TCP connections, then a timed one.
    if (rank == 0) {
      MPI_Send(buf, 1, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      double t0 = MPI_Wtime();
      MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      double t = MPI_Wtime() - t0;
      printf("transfer %zu bytes to rank %d in %.3f s: %.3f Gbit/s\n", bytes, peer, t,
             (double)bytes * 8 / t / 1e9);
      t0 = MPI_Wtime();
      for (int k = 0; k < 1000; k++) {
        MPI_Send(&ack, 1, MPI_CHAR, peer, 4, MPI_COMM_WORLD);
        MPI_Recv(&ack, 1, MPI_CHAR, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      printf("round trip to rank %d: %.1f us\n", peer, (MPI_Wtime() - t0) * 1e3);
    } else {
      MPI_Recv(buf, 1, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&ack, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, (int)bytes, MPI_CHAR, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&ack, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
      for (int k = 0; k < 1000; k++) {
        MPI_Recv(&ack, 1, MPI_CHAR, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&ack, 1, MPI_CHAR, 0, 4, MPI_COMM_WORLD);
      }
    }
    free(buf);
  }
  free(hosts);
  MPI_Finalize();
  return 0;
}
