# A Ruby service with a known call chain and its own CPU accounting, the
# Ruby twin of pyservice.py and nodeservice.js. Speaks the
# tests/workloads protocol: prints "ready", waits for a line, works,
# reports, then waits for stdin to close.
#
# Modes (ARGV[0]), with seconds of work in ARGV[1]:
# - cpu: main -> serve -> handle -> parse_request (which calls the small
#   mix in a block of Integer#times) | render_page, timing each leaf with
#   the thread's CPU clock ("share NAME SECONDS"), "handled N calls" (the
#   handle() calls made: the work done), then "cpu S" (the thread's CPU
#   over the whole serve);
# - exit: as cpu, but ruby exits right after its report;
# - threads: a Thread runs parse_request, another render_page ("tid TID
#   0" for the parser, "tid TID 1" for the renderer), then "tcpu TID S"
#   for each and "cpu S";
# - ractors: two Ractors, one in ractor_a (parse_request), one in
#   ractor_b (render_page), main waiting in Ractor#take; "share NAME
#   SECONDS" for each Ractor's thread CPU over its work, then "cpu S";
# - sleep: nap() -> Kernel#sleep for 100 ms until the seconds are up;
# - pipe: await_request() blocks in IO#read of a pipe, a byte arriving
#   every 100 ms from a thread.

def thread_cpu
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def mix(x)
  (x * 31 + 7) % 1_000_003
end

def parse_request(n)
  acc = 0
  n.times { |i| acc = mix(acc + i) }
  acc
end

def render_page(n)
  out = +""
  i = 0
  while i < n
    out << i.to_s
    i += 1
  end
  out.length
end

$spent = Hash.new(0.0)
$handled = 0

def handle
  t0 = thread_cpu
  parse_request(4000)
  t1 = thread_cpu
  render_page(1500)
  t2 = thread_cpu
  $spent["parse_request"] += t1 - t0
  $spent["render_page"] += t2 - t1
end

def serve(seconds)
  deadline = now + seconds
  while now < deadline
    handle
    $handled += 1
  end
end

def nap(seconds)
  deadline = now + seconds
  sleep(0.1) while now < deadline
end

def await_request(seconds)
  r, w = IO.pipe
  writer = Thread.new do
    deadline = now + seconds
    while now < deadline
      sleep(0.1)
      w.write("x")
    end
    w.close
  end
  while r.read(1)
  end
  writer.join
end

def parser_loop(seconds)
  deadline = now + seconds
  parse_request(4000) while now < deadline
end

def renderer_loop(seconds)
  deadline = now + seconds
  render_page(1500) while now < deadline
end

def ractor_a(seconds)
  deadline = now + seconds
  parse_request(4000) while now < deadline
end

def ractor_b(seconds)
  deadline = now + seconds
  render_page(1500) while now < deadline
end

# Runs each of ractor_a and ractor_b in its Ractor; prints each one's CPU.
def ractors(seconds)
  Warning[:experimental] = false
  workers = %i[ractor_a ractor_b].map do |fn|
    Ractor.new(fn, seconds) do |f, s|
      Ractor.receive
      t0 = thread_cpu
      __send__(f, s)
      [f, thread_cpu - t0]
    end
  end
  puts "ready"
  $stdin.gets
  t0 = thread_cpu
  workers.each { |r| r.send(true) }
  workers.map(&:take).each { |f, s| puts "share #{f} #{s}" }
  puts "cpu #{thread_cpu - t0}"
end

def tid
  File.readlink("/proc/thread-self").split("/").last
end

def main
  mode = ARGV[0] || "cpu"
  seconds = Float(ARGV[1] || "4")
  $stdout.sync = true
  if mode == "ractors"
    ractors(seconds)
  elsif mode == "threads"
    ready = Queue.new
    go = Queue.new
    workers = [:parser_loop, :renderer_loop].each_with_index.map do |fn, index|
      Thread.new do
        ready << "tid #{tid} #{index}"
        go.pop
        t0 = thread_cpu
        send(fn, seconds)
        [tid, thread_cpu - t0]
      end
    end
    2.times { puts ready.pop }
    puts "ready"
    $stdin.gets
    t0 = thread_cpu
    2.times { go << true }
    workers.map(&:value).each { |t, s| puts "tcpu #{t} #{s}" }
    puts "cpu #{thread_cpu - t0}"
  else
    puts "ready"
    $stdin.gets
    t0 = thread_cpu
    case mode
    when "cpu", "exit"
      serve(seconds)
      $spent.each { |name, s| puts "share #{name} #{s}" }
      puts "handled #{$handled} calls"
    when "sleep"
      nap(seconds)
    when "pipe"
      await_request(seconds)
    else
      raise "unknown mode #{mode}"
    end
    puts "cpu #{thread_cpu - t0}"
    exit!(0) if mode == "exit"
  end
  $stdin.read
end

main
