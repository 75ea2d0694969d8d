// select, Go (GOMAXPROCS=1): a sender puts ROUNDS values on 4 unbuffered
// channels in turn; the receiver takes them with a select over the 4.
// Prints ns per received value, as weft-bench's "select" does.
// args: [ROUNDS=1000000]
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := 1000000
	if len(os.Args) > 1 {
		if v, err := strconv.Atoi(os.Args[1]); err == nil {
			n = v
		}
	}
	var c [4]chan int
	for k := range c {
		c[k] = make(chan int)
	}
	done := make(chan int)
	t0 := time.Now()
	go func() {
		for i := 0; i < n; i++ {
			c[i&3] <- i
		}
	}()
	go func() {
		sum := 0
		for i := 0; i < n; i++ {
			select {
			case v := <-c[0]:
				sum += v
			case v := <-c[1]:
				sum += v
			case v := <-c[2]:
				sum += v
			case v := <-c[3]:
				sum += v
			}
		}
		done <- sum
	}()
	sum := <-done
	wall := time.Since(t0)
	status := "ok"
	if sum != n*(n-1)/2 {
		status = "wrong_sum"
	}
	fmt.Printf("experiment=select peer=go status=%s channels=4 rounds=%d wall_s=%.3f ns_per_op=%.1f gomaxprocs=1\n",
		status, n, wall.Seconds(), float64(wall.Nanoseconds())/float64(n))
}
