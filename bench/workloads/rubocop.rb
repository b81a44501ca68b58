# rubocop as bench/ruby.py runs it: loads rubocop, prints "ready", waits
# for a line, lints with rubocop's own arguments (ARGV), then prints
# "status N" (rubocop's exit status), "wall S" and "cpu S" (the process's
# CPU over the lint) and waits for stdin to close. Loading comes before
# "ready", so a profiler attaches to the process as it will lint.

require "rubocop"

$stdout.sync = true
puts "ready"
$stdin.gets
cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
wall0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
status = RuboCop::CLI.new.run(ARGV)
puts "wall #{Process.clock_gettime(Process::CLOCK_MONOTONIC) - wall0}"
puts "status #{status}"
puts "cpu #{Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu0}"
$stdin.read
