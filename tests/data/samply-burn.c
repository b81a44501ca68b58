#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
__attribute__((noinline)) void alpha(double s){double t=now();while(now()-t<s);}
__attribute__((noinline)) void beta(double s){double t=now();while(now()-t<s);}
int main(void){alpha(0.2);beta(0.1);return 0;}
